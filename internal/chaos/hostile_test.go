package chaos_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// hashTag returns the part of a Redis key that Redis Cluster hashes.
func hashTag(k string) string {
	if i := strings.IndexByte(k, '{'); i >= 0 {
		if j := strings.IndexByte(k[i+1:], '}'); j > 0 {
			return k[i+1 : i+1+j]
		}
	}
	return k
}

// unescapeKey undoes the engine's escaping of a key inside its hash tag.
func unescapeKey(tag string) string {
	return strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%").Replace(tag)
}

// FuzzKeyEncoding checks, through the engine on a real Redis, that any key names one
// lock: its Redis names share one hash tag that spells the key back, two keys exclude
// each other exactly when they are equal, and releasing leaves nothing behind.
func FuzzKeyEncoding(f *testing.F) {
	for _, seed := range [][2]string{
		{"a{b}", "a%7Bb%7D"}, {"{", "%7B"}, {"}", "%7D"}, {"%", "%25"}, {"%7B", "{"},
		{"a:b", "a"}, {"x\x00", "x"}, {"", "a"}, {"\r\n", "\n"}, {"}{", "{}"},
		{"\xff\xfe", "\xff"}, {"k", "k"}, {"{{}}", "{}"}, {"guard:{x}", "x"},
	} {
		f.Add(seed[0], seed[1])
	}
	srv := redistest.Start(f)
	c := srv.Client(f)
	const maxKey = 4096
	l, err := guard.New(c, guard.MaxKeyLen(maxKey), guard.FenceRetention(time.Second))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = l.Close() })
	f.Fuzz(func(t *testing.T, k1, k2 string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		le, err := l.TryAcquire(ctx, k1)
		if k1 == "" || len(k1) > maxKey {
			if !errors.Is(err, guard.ErrInvalidKey) {
				t.Fatalf("TryAcquire(%q) = %v, want ErrInvalidKey", k1, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("TryAcquire(%q): %v", k1, err)
		}
		defer le.Release(ctx)
		names, err := c.Keys(ctx, "guard:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		var locks []string
		for _, n := range names {
			if redistest.Holder(t, ctx, c, n) == string(le.Owner()) {
				locks = append(locks, n)
			}
		}
		if len(locks) != 1 {
			t.Fatalf("key %q: %d locks held by its owner in Redis: %q", k1, len(locks), locks)
		}
		lock := locks[0]
		if got := unescapeKey(hashTag(lock)); got != k1 || hashTag(lock+":queue") != hashTag(lock) || hashTag(lock+":release") != hashTag(lock) {
			t.Fatalf("key %q: lock %q has hash tag %q (key %q)", k1, lock, hashTag(lock), got)
		}
		other, err := l.TryAcquire(ctx, k2) // a fresh owner
		switch {
		case k1 == k2 && !errors.Is(err, guard.ErrLocked):
			t.Fatalf("key %q not exclusive: %v", k1, err)
		case k1 != k2 && k2 != "" && len(k2) <= maxKey && err != nil:
			t.Fatalf("keys %q and %q share a lock: %v", k1, k2, err)
		case err == nil:
			if err := other.Release(ctx); err != nil {
				t.Fatalf("Release(%q): %v", k2, err)
			}
		}
		if err := le.Release(ctx); err != nil {
			t.Fatalf("Release(%q): %v", k1, err)
		}
		if h := redistest.Holder(t, ctx, c, lock); h != "" {
			t.Fatalf("key %q left its lock held", k1)
		}
	})
}

// transfer is a request whose two fields name the lock, like a tenant and a resource.
type transfer struct {
	Tenant string
	ID     string
}

// TestTenantCollisions: values that concatenate to the same text must not share a lock
// through a key template with two placeholders, while equal values must. Keys with
// braces, control characters and a 1 MiB value go through the same path.
func TestTenantCollisions(t *testing.T) {
	srv := redistest.Start(t)
	l, err := guard.New(srv.Client(t), guard.MaxKeyLen(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	entered := make(chan struct{})
	release := make(chan struct{})
	run := guard.Wrap(func(ctx context.Context, r transfer) (int64, error) {
		entered <- struct{}{}
		<-release
		le, _ := guard.LeaseFromContext(ctx)
		return le.Token(), nil
	}, guard.Use(l), guard.Key("t:{req.Tenant}:{req.ID}"), guard.Retry(guard.NoRetry()))

	big := strings.Repeat("{%}\r\n\x00", (1<<20)/6)
	pairs := [][2]transfer{
		{{"a:b", "c"}, {"a", "b:c"}},
		{{"a", ":b"}, {"a:", "b"}},
		{{"%3A", "x"}, {":", "x"}},
		{{"{x}", "y"}, {"%7Bx%7D", "y"}},
		{{"t\r\n", "1"}, {"t", "\r\n1"}},
		{{big + ":", "1"}, {big, ":1"}},
		{{big, "a:b"}, {big + ":a", "b"}},
	}
	ctx := context.Background()
	for _, p := range pairs {
		// Both at once: each must get its own lock.
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, req := range p {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = run(ctx, req)
			}()
		}
		got := 0
		for got < 2 {
			select {
			case <-entered:
				got++
			case <-time.After(5 * time.Second):
				close(release)
				wg.Wait()
				t.Fatalf("%.30q and %.30q share a lock: only %d entered (errors %v)", p[0], p[1], got, errs)
			}
		}
		release <- struct{}{}
		release <- struct{}{}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%.30q: %v", p[i], err)
			}
		}
	}

	// An empty value is refused, never the lock of every request without one.
	if _, err := run(ctx, transfer{"a", ""}); !errors.Is(err, guard.ErrInvalidKey) {
		t.Fatalf("empty ID: %v, want ErrInvalidKey", err)
	}

	// The same values exclude each other.
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, transfer{"a:b", "c"})
		done <- err
	}()
	<-entered
	if _, err := run(ctx, transfer{"a:b", "c"}); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("equal requests did not exclude each other: %v", err)
	}
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// ownerTarget is a lock held by one owner and the ways a request can claim to be it.
type ownerTarget struct {
	locker *guard.Locker
	signer *ctxid.Signer
	owner  ctxid.ID
	held   *guard.Lease
	good   string // a valid token for owner
}

func newOwnerTarget(t testing.TB, key string) *ownerTarget {
	t.Helper()
	srv := redistest.Start(t)
	holder, err := guard.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	l, err := guard.New(srv.Client(t), guard.Retry(guard.NoRetry()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("chaos-secret-0123456789abcdef!!")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, owner := ctxid.Ensure(context.Background())
	held, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	ctx, owner = held.Context(), held.Owner() // the section that holds key
	good, ok := signer.Outbound(ctx)
	if !ok {
		t.Fatal("no outbound token")
	}
	return &ownerTarget{locker: l, signer: signer, owner: owner, held: held, good: good}
}

// mayReenter reports whether a request carrying token may act as the target's owner:
// only when the token verifies and vouches for that owner.
func (o *ownerTarget) mayReenter(token string) bool {
	c, err := o.signer.Verify(token)
	return err == nil && c.Owner == o.owner
}

// FuzzOwnerHeader sends arbitrary owner headers through the Echo middleware to a route
// whose lock another owner holds. A request reenters only with a token that verifies
// for that owner; every other one is refused as busy (409), never served, never an
// error of the server, and never changes the holder's lease.
func FuzzOwnerHeader(f *testing.F) {
	const key = "vault"
	o := newOwnerTarget(f, key)
	for _, seed := range spoofSeeds(o) {
		f.Add(seed)
	}
	e := echo.New()
	var mu sync.Mutex
	var ranAs ctxid.ID
	e.POST("/vault", func(c echo.Context) error {
		id, _ := ctxid.FromContext(c.Request().Context())
		mu.Lock()
		ranAs = id
		mu.Unlock()
		return c.NoContent(http.StatusNoContent)
	}, middleware.LockWithConfig(middleware.LockConfig{Locker: o.locker, Key: key, Signer: o.signer}))
	f.Fuzz(func(t *testing.T, value string) {
		req := httptest.NewRequest(http.MethodPost, "/vault", nil)
		req.Header[ctxid.Header] = []string{value}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		switch {
		case o.mayReenter(value):
			mu.Lock()
			defer mu.Unlock()
			if rec.Code != http.StatusNoContent || ranAs != o.owner {
				t.Fatalf("a valid token for the holder: status %d, ran as %q", rec.Code, ranAs)
			}
		case rec.Code != http.StatusConflict:
			t.Fatalf("owner header %q: status %d, want 409 (the lock is another owner's)", value, rec.Code)
		}
		if err := o.held.Err(); err != nil {
			t.Fatalf("owner header %q ended the holder's lease: %v", value, err)
		}
	})
}

// FuzzOwnerMetadata does the same through the gRPC unary server interceptor and
// incoming metadata: spoofed owners get codes.Aborted (busy), never the handler.
func FuzzOwnerMetadata(f *testing.F) {
	const key, method = "vault", "/chaos.Vault/Open"
	o := newOwnerTarget(f, key)
	for _, seed := range spoofSeeds(o) {
		f.Add(seed)
	}
	unary := interceptor.UnaryServerInterceptor(o.locker, interceptor.WithSigner(o.signer),
		interceptor.WithRules(interceptor.Rule{Method: method, Key: key}),
		interceptor.WithUnregisteredServices("chaos.Vault")) // called directly, no descriptor
	info := &grpc.UnaryServerInfo{FullMethod: method}
	f.Fuzz(func(t *testing.T, value string) {
		var ranAs ctxid.ID
		handler := func(ctx context.Context, _ any) (any, error) {
			ranAs, _ = ctxid.FromContext(ctx)
			return "ok", nil
		}
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(interceptor.MetadataKey, value))
		_, err := unary(ctx, struct{}{}, info, handler)
		switch {
		case o.mayReenter(value):
			if err != nil || ranAs != o.owner {
				t.Fatalf("a valid token for the holder: %v, ran as %q", err, ranAs)
			}
		case status.Code(err) != codes.Aborted || ranAs != "":
			t.Fatalf("owner metadata %q: %v (code %s), handler ran as %q; want codes.Aborted", value, err, status.Code(err), ranAs)
		}
		if err := o.held.Err(); err != nil {
			t.Fatalf("owner metadata %q ended the holder's lease: %v", value, err)
		}
	})
}

// spoofSeeds are owner values a hostile caller would try: the holder's bare ID, its
// token altered in every field, tokens of other keys, oversized and CR/LF-laden ones.
func spoofSeeds(o *ownerTarget) []string {
	other, _ := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("another-secret-0123456789abcdef")}})
	forged, _ := other.Sign(o.owner, 1)
	parts := strings.Split(o.good, ".")
	swap := func(i int, v string) string {
		p := append([]string(nil), parts...)
		p[i] = v
		return strings.Join(p, ".")
	}
	return []string{
		o.good,
		string(o.owner),
		"",
		forged,
		swap(0, "v2"),
		swap(1, "k2"),
		swap(2, string(ctxid.New())),
		swap(3, "9999999999"),
		swap(4, "0"),
		swap(5, strings.Repeat("A", 43)),
		o.good + "=",
		o.good + "\r\nGuardkit-Owner: " + o.good,
		o.good[:len(o.good)-1] + "\n",
		o.good + "." + strings.Repeat("A", ctxid.MaxTokenLen),
		strings.Repeat("v1.k1.", 100),
	}
}

// TestOwnerTokenReplay: a token vouches for a section of a request, not for a key.
// Captured from one request, it lets another request act inside that section until it
// expires (MaxAge): it reenters the locks the section holds, as ctxid documents, and not
// those of a sibling section of the same request. After MaxAge it opens nothing.
func TestOwnerTokenReplay(t *testing.T) {
	o := newOwnerTarget(t, "account:1")
	sibling, err := o.locker.Acquire(ctxid.NewContext(context.Background(), o.owner.Root()), "account:2")
	if err != nil {
		t.Fatal(err)
	}
	defer sibling.Release(context.Background())
	ctx, _, err := o.signer.Accept(context.Background(), o.good)
	if err != nil {
		t.Fatal(err)
	}
	le, err := o.locker.Acquire(ctx, "account:1")
	if err != nil || !le.Reentrant() {
		t.Fatalf("replayed token on the section's lock: %v; it reenters", err)
	}
	_ = le.Release(ctx)
	if _, err := o.locker.TryAcquire(ctx, "account:2"); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("replayed token on a sibling section's lock: %v, want ErrLocked", err)
	}
	later, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("chaos-secret-0123456789abcdef!!")}},
		ctxid.WithClock(func() time.Time { return time.Now().Add(6 * time.Minute) }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, owner, err := later.Accept(context.Background(), o.good)
	if !errors.Is(err, ctxid.ErrExpired) || owner == o.owner {
		t.Fatalf("token replayed after MaxAge: owner %q, err %v; want a fresh owner and ErrExpired", owner, err)
	}
	if _, err := o.locker.Acquire(ctx, "account:1"); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("expired token: %v, want ErrLocked", err)
	}
}
