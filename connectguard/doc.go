// Package connectguard guards connect-go (connectrpc.com/connect) procedures with guard
// locks, and carries the lock owner on outgoing connect calls, so that a call chain
// that comes back on a key it already holds reenters the lock instead of deadlocking —
// across connect, gRPC and HTTP services alike.
//
// It is a module of its own (github.com/guardkit/guardkit/connectguard), so that users
// of guardkit who do not use connect never download connect, and guardkit's go.mod
// keeps its own Go version whatever connect's is.
//
// # Usage
//
// The handler interceptor takes package interceptor's options: locks declared on the
// methods in their .proto files with the (guardkit.v1.lock) option, rules from Go, a
// Signer that verifies owners sent by calling services:
//
//	guarded := connect.WithInterceptors(connectguard.NewInterceptor(locker,
//		interceptor.WithProtoOptions(), // read (guardkit.v1.lock) from the registered descriptors
//		interceptor.WithSigner(signer), // trust owners signed with the services' shared key
//	))
//	mux.Handle(shopv1connect.NewOrdersHandler(orders, guarded))
//
// or, with rules (a streaming procedure keys on {md...}, the request's headers, or
// {method}):
//
//	connectguard.NewInterceptor(locker, interceptor.WithRules(
//		interceptor.Rule{Method: "/shop.v1.Orders/Cancel", Key: "order:{req.order_id}"},
//		interceptor.Rule{Method: "/shop.v1.Orders/Follow", Key: "order:{md.x-order}"},
//	))
//
// Rules, keys, waiting, owners and errors are exactly the gRPC interceptors' (see
// package interceptor): a procedure is locked as the same gRPC method would be, on the
// same Redis key, so connect, gRPC and HTTP services of one system share their locks.
//
// Clients carry the owner with NewClientInterceptor (or an httpguard.Transport under
// their http.Client):
//
//	payments := shopv1connect.NewPaymentsClient(httpClient, paymentsURL,
//		connect.WithInterceptors(connectguard.NewClientInterceptor(signer)))
//
// # Errors
//
// A busy lock fails the call with connect.CodeAborted; its details carry an
// errdetails.RetryInfo whose RetryDelay is guard's retry hint (how long the lock's holds
// last, bounded by the holder's TTL left) and an errdetails.ErrorInfo with Domain
// interceptor.ErrorDomain and Reason interceptor.ReasonLocked:
//
//	var ce *connect.Error
//	if errors.As(err, &ce) && ce.Code() == connect.CodeAborted {
//		for _, d := range ce.Details() {
//			if v, err := d.Value(); err == nil {
//				if ri, ok := v.(*errdetails.RetryInfo); ok {
//					time.Sleep(ri.GetRetryDelay().AsDuration()) // then retry
//				}
//			}
//		}
//	}
//
// Redis unreachable is connect.CodeUnavailable, a key the request cannot make
// connect.CodeInvalidArgument, a deadlock's victim CodeAborted without RetryInfo, a
// lease lost while the handler ran CodeAborted with Reason interceptor.ReasonLeaseLost.
// Messages are plain words and never carry the key, an owner, a token or Redis's
// address. Over the Connect protocol, CodeAborted is HTTP 409.
//
// # Cost
//
// The interceptors are package interceptor's gRPC interceptors, called with the
// connect request's headers as incoming metadata: a connect server that uses them links
// the gRPC packages interceptor imports (google.golang.org/grpc), though it serves no
// gRPC-go traffic.
package connectguard
