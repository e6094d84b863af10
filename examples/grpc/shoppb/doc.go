// Package shoppb holds the messages and service stubs of the grpc example, generated
// from shop.proto, whose methods declare their locks with the (guardkit.v1.lock)
// option. To regenerate them after editing shop.proto, from the repository's root:
//
//	make proto
//
// which installs protoc and the pinned protoc-gen-go and protoc-gen-go-grpc when they
// are missing; make test checks that the committed code is current.
package shoppb
