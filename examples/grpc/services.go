package main

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/examples/grpc/shoppb"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
)

// orderKey is the Redis hash of an order: amount, status ("paid", "cancelled") and
// refunded (set once the amount was paid back).
func orderKey(id string) string { return "grpcshop:order:" + id }

// serve serves srv on addr (a free port for port 0) and returns the address.
func serve(srv *grpc.Server, addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	go srv.Serve(ln)
	return ln.Addr().String(), nil
}

// readme:begin grpc

// startPayments runs the Payments service. Refund declares its lock in shop.proto —
// the order's, waited for up to half a second — and WithProtoOptions makes the
// interceptor read it. The interceptor accepts the lock owner of a caller whose token
// signer verifies, so a call made while the caller holds the order's lock reenters it
// instead of waiting for it.
func startPayments(rdb *redis.Client, locker *guard.Locker, signer *ctxid.Signer) *grpc.Server {
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker,
		interceptor.WithProtoOptions(),
		interceptor.WithSigner(signer),
	)))
	shoppb.RegisterPaymentsServer(srv, &payments{rdb: rdb})
	return srv
}

// startOrders runs the Orders service, whose Cancel locks the order, as shop.proto
// declares, and calls Refund: its client connection to Payments sends the lock owner
// of each call, signed.
func startOrders(rdb *redis.Client, locker *guard.Locker, signer *ctxid.Signer, paymentsAddr string) (*grpc.Server, *grpc.ClientConn, error) {
	conn, err := grpc.NewClient(paymentsAddr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(signer)))
	if err != nil {
		return nil, nil, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker,
		interceptor.WithProtoOptions(),
		interceptor.WithSigner(signer),
	)))
	shoppb.RegisterOrdersServer(srv, &orders{rdb: rdb, payments: shoppb.NewPaymentsClient(conn)})
	return srv, conn, nil
}

// readme:end

// orders implements Orders.
type orders struct {
	shoppb.UnimplementedOrdersServer
	rdb      *redis.Client
	payments shoppb.PaymentsClient
}

// Cancel runs under the order's lock: read the status, refund, write the status.
func (o *orders) Cancel(ctx context.Context, req *shoppb.CancelRequest) (*shoppb.CancelReply, error) {
	lease, _ := guard.LeaseFromContext(ctx)
	reply := &shoppb.CancelReply{CancelToken: lease.Token()}
	st, err := o.rdb.HGet(ctx, orderKey(req.OrderId), "status").Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, status.Errorf(codes.NotFound, "order %s not found", req.OrderId)
	case err != nil:
		return nil, err
	case st == "cancelled":
		return reply, nil
	}
	// ctx carries this RPC's lock owner; the client interceptor sends it along.
	r, err := o.payments.Refund(ctx, &shoppb.RefundRequest{OrderId: req.OrderId})
	if err != nil {
		return nil, fmt.Errorf("refund: %w", err)
	}
	reply.Refunded, reply.RefundReentered, reply.RefundToken = r.Refunded, r.Reentered, r.Token
	return reply, o.rdb.HSet(ctx, orderKey(req.OrderId), "status", "cancelled").Err()
}

// payments implements Payments.
type payments struct {
	shoppb.UnimplementedPaymentsServer
	rdb *redis.Client
}

// Refund runs under the order's lock: pay the amount back unless it already was.
func (p *payments) Refund(ctx context.Context, req *shoppb.RefundRequest) (*shoppb.RefundReply, error) {
	lease, _ := guard.LeaseFromContext(ctx)
	reply := &shoppb.RefundReply{Reentered: lease.Reentrant(), Token: lease.Token()}
	v, err := p.rdb.HMGet(ctx, orderKey(req.OrderId), "amount", "refunded").Result()
	switch {
	case err != nil:
		return nil, err
	case v[0] == nil:
		return nil, status.Errorf(codes.NotFound, "order %s not found", req.OrderId)
	case v[1] != nil:
		return reply, nil // refunded before
	}
	var amount int64
	if _, err := fmt.Sscan(v[0].(string), &amount); err != nil {
		return nil, err
	}
	reply.Refunded = amount
	return reply, p.rdb.HSet(ctx, orderKey(req.OrderId), "refunded", amount).Err()
}
