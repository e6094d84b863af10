package fanout_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/fanout"
	"github.com/guardkit/guardkit/guard/internal/script"
)

// server stands for one independent server: here a function that answers whether it
// grants the lock.
type server struct{ grants bool }

func (server) Run(context.Context, *script.Script, []any) *redis.Cmd { panic("no script calls") }
func (server) Legacy() bool                                          { return false }
func (server) Pipeline() redis.Pipeliner                             { panic("no script calls") }

// majority decides a round once a majority of the servers granted, or refused.
type majority struct {
	servers          []server
	granted, refused int
}

func (m *majority) Call(_ context.Context, i int) (any, error) { return m.servers[i].grants, nil }

func (m *majority) Take(r fanout.Reply) bool {
	if r.Err == nil && r.V.(bool) {
		m.granted++
	} else {
		m.refused++
	}
	need := len(m.servers)/2 + 1
	return m.granted >= need || m.refused >= need
}

func (m *majority) Late(fanout.Reply) {} // a late grant would be given back here
func (m *majority) Contested() bool   { return m.refused > 0 }

// A round asks every server at once and is decided by a majority of their replies.
func Example() {
	var wg sync.WaitGroup
	done := make(chan struct{})
	aside := func(fn func()) bool {
		wg.Add(1)
		go func() { defer wg.Done(); fn() }()
		return true
	}
	m := &majority{servers: []server{{true}, {false}, {true}}}
	nodes := make([]fanout.Node, len(m.servers))
	for i, s := range m.servers {
		nodes[i] = s
	}
	f := fanout.New(nodes)
	f.Start(aside, done, 0)

	var rs fanout.Run
	last := make(chan struct{})
	f.Round(context.Background(), func() { close(last) }, fanout.Limits{Budget: f.Budget(time.Second), Patience: time.Second}, &rs, m)
	<-last
	fmt.Println("granted by a majority:", m.granted >= 2)

	close(done) // the owner closes: the workers end
	wg.Wait()
	// Output: granted by a majority: true
}
