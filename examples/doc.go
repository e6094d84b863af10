// Package examples holds guardkit's runnable programs, one per directory, and the test
// that builds and runs every one of them against a real redis-server and against the
// embedded default, and keeps the README's quick starts identical to their code.
//
//	make demo                  # the wallet under contention, with and without the lock
//	go run ./examples/service  # guard.Wrap on service methods, nested calls
//	go run ./examples/echo     # an Echo service with locked routes, on :8080
//	go run ./examples/grpc     # two gRPC services, reentrancy across them
//	go run ./examples/tracing  # the service example's spans and metrics, on stdout
//
// Every program uses the Redis named by -redis or REDIS_ADDR and, when there is none,
// starts an embedded one in its own process (see package internal/embedded); its first
// line of output says which.
package examples
