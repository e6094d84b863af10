// Command nethttp locks net/http routes with package httpguard: a wallet service on the
// standard ServeMux takes 20 concurrent withdrawals of one account one at a time (none
// lost), answers a busy account 409 with Retry-After, and calls a ledger service whose
// route locks the same account; through an httpguard.Transport the ledger reenters the
// wallet's lock, and so does the wallet when the ledger calls it back (A → B → A).
//
//	go run ./examples/nethttp                           # embedded Redis
//	REDIS_ADDR=localhost:6379 go run ./examples/nethttp # a real one
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/httpguard"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address (default $"+embedded.EnvAddr+", else an embedded Redis)")
	flag.Parse()
	log.SetFlags(0)
	if err := run(*redisAddr); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// wallet holds balances in memory; its handlers read, wait and write, so concurrent
// withdrawals of one account lose updates unless they take turns.
type wallet struct {
	mu       sync.Mutex
	balances map[string]int
	ledger   string       // the ledger service's URL
	client   *http.Client // carries the request's owner to the ledger
}

func (w *wallet) withdraw(rw http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	w.mu.Lock()
	b := w.balances[id]
	w.mu.Unlock()
	time.Sleep(time.Millisecond) // a concurrent withdrawal would read the same balance here
	w.mu.Lock()
	w.balances[id] = b - 1
	w.mu.Unlock()
	rw.WriteHeader(http.StatusNoContent)
}

// close records the closing in the ledger, which locks the account too.
func (w *wallet) close(rw http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, w.ledger+"/entries/"+r.PathValue("id"), nil)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	resp, err := w.client.Do(req) // r.Context() carries the owner: the ledger reenters
	if err != nil {
		http.Error(rw, "ledger unreachable", http.StatusBadGateway)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	rw.WriteHeader(resp.StatusCode)
	_, _ = rw.Write(body)
}

// audit answers the ledger's call back, under the account's lock.
func (w *wallet) audit(rw http.ResponseWriter, r *http.Request) {
	le, _ := guard.LeaseFromContext(r.Context())
	fmt.Fprintf(rw, "audit reentered=%v token=%d", le.Reentrant(), le.Token())
}

func run(redisAddr string) error {
	rdb, err := embedded.Open(redisAddr, log.Default())
	if err != nil {
		return err
	}
	defer rdb.Close()
	lockers, closeLockers, err := rdb.Lockers(2, guard.TTL(5*time.Second)) // two services
	if err != nil {
		return err
	}
	defer closeLockers()
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "demo", Secret: []byte("a 32-byte secret shared by both!")}})
	if err != nil {
		return err
	}
	account := "acct-" + embedded.RunID()

	// readme:begin nethttp
	w := &wallet{balances: map[string]int{account: 100},
		client: &http.Client{Transport: httpguard.NewTransport(signer, nil)}} // sends the owner
	// Changes to one account run one at a time, in every replica; a request waits up
	// to 2s for its turn, then gets 409 Conflict with Retry-After.
	lock := httpguard.LockWithConfig(httpguard.LockConfig{
		Locker:  lockers[0],
		Key:     "account:{path.id}",
		MaxWait: 2 * time.Second,
		Signer:  signer, // trust owners signed by the ledger when it calls back
	})
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{id}/withdraw", lock(http.HandlerFunc(w.withdraw)))
	mux.Handle("POST /accounts/{id}/close", lock(http.HandlerFunc(w.close)))
	mux.Handle("GET /accounts/{id}/audit", lock(http.HandlerFunc(w.audit)))
	// readme:end
	walletURL, stopWallet, err := serve(mux)
	if err != nil {
		return err
	}
	defer stopWallet()
	ledgerURL, stopLedger, err := serve(ledger(lockers[1], signer, walletURL))
	if err != nil {
		return err
	}
	defer stopLedger()
	w.ledger = ledgerURL
	client := &http.Client{Timeout: 20 * time.Second}

	// 1. Twenty concurrent withdrawals of one account: none lost.
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s, _, err := post(client, walletURL+"/accounts/"+account+"/withdraw"); err != nil || s != http.StatusNoContent {
				errs <- fmt.Errorf("withdraw: %d %v", s, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	if b := w.balances[account]; b != 80 {
		return fmt.Errorf("balance %d after 20 withdrawals of 1 from 100: updates were lost", b)
	}
	log.Printf("20 concurrent withdrawals: balance 100 → %d", w.balances[account])

	// 2. While another owner holds the account, a withdrawal waits 2s, then gets 409
	// with Retry-After.
	held, err := lockers[1].Acquire(context.Background(), "account:"+account)
	if err != nil {
		return err
	}
	s, h, err := post(client, walletURL+"/accounts/"+account+"/withdraw")
	_ = held.Release(context.Background())
	if err != nil || s != http.StatusConflict || h.Get("Retry-After") == "" {
		return fmt.Errorf("busy account: %d, Retry-After %q, %v; want 409 with Retry-After", s, h.Get("Retry-After"), err)
	}
	log.Printf("busy account: 409, Retry-After: %s", h.Get("Retry-After"))

	// 3. wallet → ledger → wallet, all on the account's lock: each hop reenters.
	s, body, err := postBody(client, walletURL+"/accounts/"+account+"/close")
	if err != nil || s != http.StatusOK {
		return fmt.Errorf("close: %d %q %v", s, body, err)
	}
	log.Printf("wallet → ledger → wallet: %s", body)
	fmt.Println("ok: 20 withdrawals, none lost; busy is 409 with Retry-After; the call chain reentered")
	return nil
}

// ledger is a second service: it records an entry under the account's lock, which it
// reenters when the wallet calls it holding that lock, and calls the wallet back.
func ledger(locker *guard.Locker, signer *ctxid.Signer, walletURL string) http.Handler {
	client := &http.Client{Transport: httpguard.NewTransport(signer, nil)}
	mux := http.NewServeMux()
	mux.Handle("POST /entries/{id}", httpguard.LockWithConfig(httpguard.LockConfig{
		Locker: locker, Key: "account:{path.id}", Signer: signer,
		Options: []guard.Option{guard.Retry(guard.NoRetry())}, // a missing owner shows at once
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		le, _ := guard.LeaseFromContext(r.Context())
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, walletURL+"/accounts/"+r.PathValue("id")+"/audit", nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, "wallet unreachable", http.StatusBadGateway)
			return
		}
		audit, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !le.Reentrant() {
			http.Error(w, fmt.Sprintf("ledger reentered=%v, audit %d %s", le.Reentrant(), resp.StatusCode, audit), http.StatusConflict)
			return
		}
		fmt.Fprintf(w, "ledger reentered=%v token=%d; %s", le.Reentrant(), le.Token(), audit)
	})))
	return mux
}

// serve serves h on a loopback port and returns its URL and a function that stops it.
func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			log.Print(err)
		}
	}, nil
}

func post(c *http.Client, url string) (int, http.Header, error) {
	resp, err := c.Post(url, "", nil)
	if err != nil {
		return 0, nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, nil
}

func postBody(c *http.Client, url string) (int, string, error) {
	resp, err := c.Post(url, "", nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
