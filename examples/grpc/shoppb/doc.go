// Package shoppb holds the messages and service stubs of the grpc example, generated
// from shop.proto. To regenerate them, with protoc on PATH:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.11
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
//	go generate ./examples/grpc/shoppb
package shoppb

//go:generate protoc --go_out=paths=source_relative:. --go-grpc_out=paths=source_relative:. shop.proto
