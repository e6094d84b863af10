package httpguard_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/httpguard"
)

func pay(w http.ResponseWriter, r *http.Request)    { fmt.Fprintln(w, "paid", r.PathValue("id")) }
func cancel(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "cancelled", r.PathValue("id")) }

// Lock two routes of the standard ServeMux on the order they change: "order:42" is one
// lock, whichever route rendered it.
func ExampleLock() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locker, err := guard.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	lockOrder := httpguard.Lock(locker, "order:{path.id}")
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}/pay", lockOrder(http.HandlerFunc(pay)))
	mux.Handle("POST /orders/{id}/cancel", lockOrder(http.HandlerFunc(cancel)))
	// Concurrent POSTs for one order now run one at a time. A request that finds its
	// order busy waits for it, up to 5s, then gets 409 Conflict with Retry-After.
	_ = http.ListenAndServe(":8080", mux)
}

// Wait up to two seconds, trust the owners of services that share the signing key, and
// answer a lock that stays busy with a response of your own.
func ExampleLockWithConfig() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locker, err := guard.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("32 random bytes from your vault!")}})
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{id}/transfer", httpguard.LockWithConfig(httpguard.LockConfig{
		Locker:  locker,
		Key:     "account:{path.id}",
		MaxWait: 2 * time.Second,
		Signer:  signer,
		DenyHandler: func(w http.ResponseWriter, r *http.Request, err *guard.LockedError) {
			w.Header().Set("Retry-After", httpguard.RetryAfter(err.RetryAfter))
			http.Error(w, "transfer in progress", http.StatusTooManyRequests)
		},
	})(http.HandlerFunc(pay)))
}

// Send the owner of each request's context to the services it calls: a guarded route
// there, with a Signer of the same key, reenters the caller's locks. The Transport adds
// the Guardkit-Owner header only when the context carries an owner.
func ExampleNewTransport() {
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("32 random bytes from your vault!")}})
	if err != nil {
		log.Fatal(err)
	}
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, owner, err := signer.Accept(r.Context(), r.Header.Get(ctxid.Header))
		fmt.Println("service B runs as the caller's owner:", err == nil && r.Header.Get(ctxid.Header) != "" && owner != "")
	}))
	defer b.Close()

	client := &http.Client{Transport: httpguard.NewTransport(signer, nil)}
	// Inside a guarded handler, r.Context() carries the request's owner; here, one made
	// by hand.
	ctx, _ := ctxid.Ensure(context.Background())
	for _, ctx := range []context.Context{ctx, context.Background()} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
	}
	// Output:
	// service B runs as the caller's owner: true
	// service B runs as the caller's owner: false
}

// Answer a guarded call of the handler's own as the middleware answers its route's lock.
func ExampleRespond() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locker, err := guard.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	http.HandleFunc("POST /transfers", func(w http.ResponseWriter, r *http.Request) {
		err := guard.Do(r.Context(), func(ctx context.Context) error {
			return nil // move the money
		}, guard.Use(locker), guard.RawKey("account:"+r.FormValue("from")))
		if httpguard.Respond(w, r, err) { // 409 with Retry-After, 503, ...
			return
		}
		if err != nil {
			http.Error(w, "transfer failed", http.StatusInternalServerError)
		}
	})
}
