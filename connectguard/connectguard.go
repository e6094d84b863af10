package connectguard

import (
	"context"
	"net"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
)

// NewInterceptor returns a handler interceptor that runs each procedure a rule matches
// (interceptor.WithRules), or that declares a lock with the (guardkit.v1.lock) option
// (interceptor.WithProtoOptions), under that lock, taken from locker. It is the gRPC
// server interceptors of package interceptor, applied to connect: the same options,
// rules, keys, waiting, owner policy (interceptor.WithSigner), and statuses, as connect
// codes:
//
//	mux.Handle(shopv1connect.NewOrdersHandler(orders, connect.WithInterceptors(
//		connectguard.NewInterceptor(locker, interceptor.WithProtoOptions(), interceptor.WithSigner(signer)))))
//
// A busy lock fails the call with connect.CodeAborted and, in the error's details, an
// errdetails.RetryInfo carrying guard's retry hint and an errdetails.ErrorInfo with
// Reason interceptor.ReasonLocked; Redis unreachable is connect.CodeUnavailable; a key
// the request cannot make, connect.CodeInvalidArgument. The error's message is plain
// words, never the key, an owner, a token or Redis's address; the cause, with all of
// those, stays in the error's chain (errors.Is, errors.As) for server-side interceptors
// further out. {md.name} reads the request header of that name, and
// interceptor.WithTrustedPeer sees the caller's address as peer.FromContext's Addr.
//
// The lock of a streaming procedure covers the whole stream, as for gRPC; its key must
// come from {md...} or {method}. A procedure no rule matches runs unchanged, except
// that a trusted owner token is accepted into its context. On a client the interceptor
// does nothing: give clients NewClientInterceptor.
//
// It panics when the configuration is invalid, as interceptor.UnaryServerInterceptor
// does, with an error matching guard.ErrInvalidConfig.
func NewInterceptor(locker *guard.Locker, opts ...interceptor.Option) connect.Interceptor {
	return &server{
		unary:  interceptor.UnaryServerInterceptor(locker, opts...),
		stream: interceptor.StreamServerInterceptor(locker, opts...),
	}
}

// server adapts package interceptor's gRPC server interceptors to connect.
type server struct {
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
}

// WrapUnary guards a unary handler.
func (s *server) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		var resp connect.AnyResponse
		_, err := s.unary(incoming(ctx, req.Header(), req.Peer()), req.Any(), &grpc.UnaryServerInfo{FullMethod: req.Spec().Procedure},
			func(ctx context.Context, _ any) (any, error) {
				var err error
				resp, err = next(ctx, req)
				return nil, err
			})
		return resp, connectError(err)
	}
}

// WrapStreamingClient leaves client streams as they are.
func (s *server) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler guards a streaming handler for the whole stream.
func (s *server) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		spec := conn.Spec()
		info := &grpc.StreamServerInfo{
			FullMethod:     spec.Procedure,
			IsClientStream: spec.StreamType&connect.StreamTypeClient != 0,
			IsServerStream: spec.StreamType&connect.StreamTypeServer != 0,
		}
		ss := &serverStream{ctx: incoming(ctx, conn.RequestHeader(), conn.Peer())}
		return connectError(s.stream(nil, ss, info, func(_ any, ss grpc.ServerStream) error {
			return next(ss.Context(), conn)
		}))
	}
}

// incoming returns ctx with the request's headers as incoming gRPC metadata (names in
// lower case, as gRPC's) and the caller's address as its peer, for the interceptors'
// {md...} keys, owner token and WithTrustedPeer.
func incoming(ctx context.Context, h map[string][]string, p connect.Peer) context.Context {
	md := make(metadata.MD, len(h))
	for k, vs := range h {
		md[strings.ToLower(k)] = vs
	}
	ctx = metadata.NewIncomingContext(ctx, md)
	if p.Addr != "" {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: peerAddr(p.Addr)})
	}
	return ctx
}

// peerAddr is a caller's address as connect reports it.
type peerAddr string

func (a peerAddr) Network() string { return "tcp" }
func (a peerAddr) String() string  { return string(a) }

var _ net.Addr = peerAddr("")

// serverStream is the grpc.ServerStream the stream interceptor is given: only its
// context is read; the messages go through the connect stream.
type serverStream struct {
	grpc.ServerStream // nil: the interceptor calls no other method
	ctx               context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }

// connectError turns a status error made by the interceptors into a *connect.Error with
// the same code, message and details, whose chain holds the cause (guard's error). Any
// other error, such as the handler's own *connect.Error, is returned as it is.
func connectError(err error) error {
	se, ok := err.(interface{ GRPCStatus() *status.Status })
	if !ok {
		return err
	}
	st := se.GRPCStatus()
	ce := connect.NewError(connect.Code(st.Code()), &wireError{text: st.Message(), cause: err})
	for _, d := range st.Details() {
		if m, ok := d.(proto.Message); ok {
			if detail, err := connect.NewErrorDetail(m); err == nil {
				ce.AddDetail(detail)
			}
		}
	}
	return ce
}

// wireError is what the client reads (text) over the cause the server keeps.
type wireError struct {
	text  string
	cause error
}

func (e *wireError) Error() string { return e.text }
func (e *wireError) Unwrap() error { return e.cause }
