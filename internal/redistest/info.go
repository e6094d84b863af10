package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// infoTimeout bounds one INFO round trip, so a paused server fails the test
// instead of hanging it.
const infoTimeout = 2 * time.Second

// CommandCalls returns how many times the server has executed each command
// since it started, from INFO commandstats: lowercase command name (with
// "|subcommand" where Redis reports one, e.g. "config|get") to calls, e.g.
// "evalsha", "publish". Take the difference of two snapshots to measure what
// a piece of code made the server do; the INFO calls of this method are
// counted under "info".
func (s *Server) CommandCalls(tb testing.TB) map[string]int64 {
	tb.Helper()
	info := s.info(tb, "commandstats")
	calls := make(map[string]int64)
	for _, line := range strings.Split(info, "\r\n") {
		name, stats, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					tb.Fatalf("redistest: INFO commandstats line %q: %v", line, err)
				}
				calls[strings.ToLower(strings.TrimPrefix(name, "cmdstat_"))] = n
			}
		}
	}
	return calls
}

// Stat returns an integer field of INFO (all sections), e.g.
// "total_reads_processed", "total_commands_processed", "connected_clients".
// It fails the test when the field is missing or not an integer.
func (s *Server) Stat(tb testing.TB, field string) int64 {
	tb.Helper()
	v, ok := infoField(s.info(tb, "everything"), field)
	if !ok {
		tb.Fatalf("redistest: INFO has no field %q", field)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		tb.Fatalf("redistest: INFO field %s=%q is not an integer", field, v)
	}
	return n
}

// infoField returns the value of field in an INFO reply.
func infoField(info, field string) (string, bool) {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v, true
		}
	}
	return "", false
}

// info runs INFO section on a connection of its own, so it neither shares
// nor disturbs the state of the clients under test.
func (s *Server) info(tb testing.TB, section string) string {
	tb.Helper()
	reply, err := roundTrip(s.Addr(), infoTimeout, "INFO", section)
	if err != nil {
		tb.Fatalf("redistest: INFO %s on %s (is the server paused or killed?): %v", section, s.Addr(), err)
	}
	return reply
}

// roundTrip sends one command on a new connection and returns its simple,
// integer or bulk string reply. It exists so that readiness checks and INFO
// need no client pool and leave no goroutine behind.
func roundTrip(addr string, timeout time.Duration, args ...string) (string, error) {
	reply, err := call(addr, timeout, args...)
	if err != nil {
		return "", err
	}
	switch r := reply.(type) {
	case string:
		return r, nil
	case int64:
		return strconv.FormatInt(r, 10), nil
	default:
		return "", fmt.Errorf("unexpected reply %v to %s", reply, args[0])
	}
}

// replyError is an error reply of the server, as opposed to a failure to
// reach it.
type replyError string

// Error implements error.
func (e replyError) Error() string { return "redis error: " + string(e) }

// call sends one command on a new connection and returns its reply: a
// string (simple or bulk), an int64, nil (a null reply) or a []any (an
// array of these). An error reply is returned as a replyError.
func call(addr string, timeout time.Duration, args ...string) (any, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, req.String()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(conn))
}

// readReply reads one RESP2 reply.
func readReply(rd *bufio.Reader) (any, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, replyError(line[1:])
	case ':':
		n, err := strconv.ParseInt(line[1:], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("unexpected integer reply %q", line)
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < -1 {
			return nil, fmt.Errorf("unexpected bulk header %q", line)
		}
		if n == -1 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < -1 {
			return nil, fmt.Errorf("unexpected array header %q", line)
		}
		if n == -1 {
			return nil, nil
		}
		items := make([]any, n)
		for i := range items {
			if items[i], err = readReply(rd); err != nil {
				return nil, err
			}
		}
		return items, nil
	default:
		return nil, fmt.Errorf("unexpected reply %q", line)
	}
}
