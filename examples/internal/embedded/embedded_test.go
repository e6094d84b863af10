package embedded

import (
	"bytes"
	"context"
	"log"
	"strings"
	"testing"

	"github.com/guardkit/guardkit/internal/redistest"
)

// open opens the Redis that addr and $REDIS_ADDR name and returns it with Open's log.
func open(t *testing.T, addr, env string) (*Redis, string) {
	t.Helper()
	t.Setenv(EnvAddr, env)
	var out bytes.Buffer
	r, err := Open(addr, log.New(&out, "", 0))
	if err != nil {
		t.Fatalf("Open(%q) with %s=%q: %v", addr, EnvAddr, env, err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r, out.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func TestOpenEmbeddedWhenNoAddress(t *testing.T) {
	r, out := open(t, "", "")
	if got := firstLine(out); got != Banner {
		t.Fatalf("first log line = %q, want %q", got, Banner)
	}
	if !r.Embedded || !strings.HasPrefix(r.Addr, "127.0.0.1:") {
		t.Fatalf("Embedded = %v, Addr = %q; want an embedded server on loopback", r.Embedded, r.Addr)
	}
	if err := r.Client.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET on the embedded server: %v", err)
	}
}

func TestOpenRealServer(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct{ name, addr, env string }{
		{"environment", "", srv.Addr()},
		{"argument wins over environment", srv.Addr(), "127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, out := open(t, tc.addr, tc.env)
			if want := "using the Redis server at " + srv.Addr(); firstLine(out) != want {
				t.Fatalf("first log line = %q, want %q", firstLine(out), want)
			}
			if r.Embedded || r.Addr != srv.Addr() {
				t.Fatalf("Embedded = %v, Addr = %q; want the real server %s", r.Embedded, r.Addr, srv.Addr())
			}
			ctx := context.Background()
			if err := r.Client.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			// The write must be on the real server, not on an embedded one.
			if v, err := srv.Client(t).Get(ctx, "k").Result(); err != nil || v != "v" {
				t.Fatalf("GET on the real server = %q, %v", v, err)
			}
		})
	}
}

func TestOpenUnreachableServerFails(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop()
	t.Setenv(EnvAddr, "")
	var out bytes.Buffer
	r, err := Open(addr, log.New(&out, "", 0))
	if err == nil {
		r.Close()
		t.Fatalf("Open(%q) of a stopped server succeeded", addr)
	}
	if !strings.HasPrefix(err.Error(), "embedded: ") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("error %q: want the package prefix and the address", err)
	}
}
