package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/guardkit/guardkit/examples/grpc/shoppb"
	"github.com/guardkit/guardkit/guard"
)

// scenario plays an outside client of both services, and checks what they answer.
func scenario(ctx context.Context, rdb *redis.Client, orderLocker *guard.Locker, orderAddr, payAddr string) error {
	var b [2]byte
	_, _ = rand.Read(b[:])
	run := hex.EncodeToString(b[:]) // fresh order IDs, so that runs against a real Redis do not mix
	first, second := "o-"+run+"-1", "o-"+run+"-2"
	for _, id := range []string{first, second} {
		if err := rdb.HSet(ctx, orderKey(id), "amount", 30, "status", "paid").Err(); err != nil {
			return err
		}
	}

	// The outside client has no lock and no signer: plain connections.
	dial := func(addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	oc, err := dial(orderAddr)
	if err != nil {
		return err
	}
	defer oc.Close()
	pc, err := dial(payAddr)
	if err != nil {
		return err
	}
	defer pc.Close()
	ordersClient, paymentsClient := shoppb.NewOrdersClient(oc), shoppb.NewPaymentsClient(pc)

	// 1. Cancel → Refund on the same lock, across services.
	r, err := ordersClient.Cancel(ctx, &shoppb.CancelRequest{OrderId: first})
	if err != nil {
		return fmt.Errorf("Cancel(%s): %w", first, err)
	}
	log.Printf("Cancel(%s): refunded %d; Payments.Refund reentered the lock Orders.Cancel holds: %v (fencing token %d in Orders, %d in Payments)",
		first, r.Refunded, r.RefundReentered, r.CancelToken, r.RefundToken)
	if r.Refunded != 30 || !r.RefundReentered || r.CancelToken != r.RefundToken || r.CancelToken == 0 {
		return fmt.Errorf("grpc: Cancel(%s) = %v, want 30 refunded by a reentrant Refund under Cancel's token", first, r)
	}

	// 2. A duplicate Cancel refunds nothing.
	r, err = ordersClient.Cancel(ctx, &shoppb.CancelRequest{OrderId: first})
	if err != nil {
		return fmt.Errorf("Cancel(%s) again: %w", first, err)
	}
	log.Printf("Cancel(%s) again: refunded %d", first, r.Refunded)
	if r.Refunded != 0 {
		return fmt.Errorf("grpc: second Cancel(%s) refunded %d, want 0", first, r.Refunded)
	}

	// 3. While another request holds the second order's lock, a Refund that does not own
	// it waits for it, up to the max_wait that shop.proto declares, and is then refused
	// with a retry hint.
	other, err := orderLocker.Acquire(ctx, "order:"+second)
	if err != nil {
		return err
	}
	_, err = paymentsClient.Refund(ctx, &shoppb.RefundRequest{OrderId: second})
	if rerr := other.Release(ctx); rerr != nil {
		return rerr
	}
	st := status.Convert(err)
	retry := "none"
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri.GetRetryDelay().AsDuration().Round(time.Second).String()
		}
	}
	log.Printf("Refund(%s) while another request holds the order: %s %q, retry after %s", second, st.Code(), st.Message(), retry)
	if st.Code() != codes.Aborted {
		return fmt.Errorf("grpc: Refund(%s) of a locked order = %v, want Aborted", second, err)
	}
	p, err := paymentsClient.Refund(ctx, &shoppb.RefundRequest{OrderId: second})
	if err != nil {
		return fmt.Errorf("Refund(%s) after the release: %w", second, err)
	}
	log.Printf("Refund(%s) once the lock is free: refunded %d", second, p.Refunded)
	if p.Refunded != 30 || p.Reentered {
		return fmt.Errorf("grpc: Refund(%s) = %v, want 30 refunded under a fresh lock", second, p)
	}
	log.Print("ok: nested cross-service calls reenter the lock; other callers wait for it")
	return nil
}
