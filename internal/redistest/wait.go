package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

const (
	// pollInterval is how often the harness looks at a deployment it waits
	// for. It is also the resolution of the recovery times it reports.
	pollInterval = 25 * time.Millisecond
	// queryTimeout bounds one command the harness sends to one node while
	// it observes a deployment, so that a node stopped meanwhile delays an
	// observation instead of hanging it.
	queryTimeout = time.Second
	// formTimeout bounds the forming of a deployment, and its return to
	// health in Reset, on a loaded machine.
	formTimeout = 60 * time.Second
	// syncTimeout bounds the wait for replicas to apply what their primary
	// wrote before it.
	syncTimeout = 20 * time.Second
)

// poll calls check every pollInterval until it returns nil and reports how
// long that took. After timeout it gives up with the last reason check gave.
func poll(timeout time.Duration, check func() error) (time.Duration, error) {
	start := time.Now()
	for {
		err := check()
		if err == nil {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("not within %v: %w", timeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// withLogs appends the end of every node's logs to err, for a failure
// message that explains itself.
func withLogs(err error, nodes []*Server) error {
	var b strings.Builder
	for _, s := range nodes {
		fmt.Fprintf(&b, "\n--- end of redis logs of %s ---\n%s", s.Addr(), s.logs())
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// replicated waits until every replica has applied what its primary had
// written when replicated was called, comparing replication offsets.
func replicated(replicaOf map[*Server]*Server) error {
	offsets := make(map[*Server]int64)
	for _, primary := range replicaOf {
		if _, ok := offsets[primary]; ok {
			continue
		}
		off, err := replicationField(primary, "master_repl_offset")
		if err != nil {
			return err
		}
		offsets[primary] = off
	}
	_, err := poll(syncTimeout, func() error {
		for replica, primary := range replicaOf {
			off, err := replicationField(replica, "slave_repl_offset")
			if err != nil {
				return err
			}
			if off < offsets[primary] {
				return fmt.Errorf("replica %s is at offset %d, its primary %s was at %d", replica.Addr(), off, primary.Addr(), offsets[primary])
			}
		}
		return nil
	})
	return err
}

// replicationField reads an integer field of INFO replication.
func replicationField(s *Server, field string) (int64, error) {
	info, err := roundTrip(s.Addr(), queryTimeout, "INFO", "replication")
	if err != nil {
		return 0, fmt.Errorf("INFO replication on %s: %w", s.Addr(), err)
	}
	v, ok := infoField(info, field)
	if !ok {
		return 0, fmt.Errorf("INFO replication on %s has no %s", s.Addr(), field)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("INFO replication on %s: %s=%q: %w", s.Addr(), field, v, err)
	}
	return n, nil
}
