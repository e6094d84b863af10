package guard

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// maxLabelLen bounds the text of a Label, in bytes. With the Locker's ID and a trace ID
// added, a label keeps under 200 bytes in Redis per hold.
const maxLabelLen = 128

// Label makes every new hold carry a label in Redis, which Inspect and List report with
// the holder and the guardkit command prints: the Locker's ID, text, and the trace ID of
// the span in the acquiring context when there is one, so that "held by orders@web-3 pid
// 4242 trace 4bf92f…" leads to the trace. text "" labels holds with the process:
// "<service>@<host> pid <pid>", where the service is $OTEL_SERVICE_NAME, else the
// program's file name (cut to its last 128 bytes when longer, with control characters
// shown as '?'). Other text must be at most 128 bytes and hold no control characters.
//
// A label costs one more hash field per hold, written by the acquire script of a new
// hold only (reentries and renewals do not touch it), and one allocation per new hold in
// this process. Without Label nothing is written and nothing is allocated: holds then
// show their owner, hold count, token, time left and acquisition time, and the process
// that holds them only to that process's own Inspect.
// Applies to New and to each call. Default: no label.
func Label(text string) Option {
	return Option{name: "Label", scope: scopeLocker | scopeCall, apply: func(s *settings) {
		if text == "" {
			text = processLabel()
		}
		s.label = text
	}}
}

// processLabel is the text Label("") gives holds.
var processLabel = sync.OnceValue(func() string {
	service := os.Getenv("OTEL_SERVICE_NAME")
	if service == "" {
		service = filepath.Base(os.Args[0])
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	s := service + "@" + host + " pid " + strconv.Itoa(os.Getpid())
	if len(s) > maxLabelLen {
		s = s[len(s)-maxLabelLen:] // the pid and host say more than a long path
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
})

// validateLabel checks the Label option of s.
func (s *settings) validateLabel() error {
	if len(s.label) > maxLabelLen {
		return &ConfigError{Field: "Label", Reason: fmt.Sprintf("must be at most %d bytes, got %d", maxLabelLen, len(s.label))}
	}
	if i := strings.IndexFunc(s.label, func(r rune) bool { return r < ' ' || r == 0x7f }); i >= 0 {
		return &ConfigError{Field: "Label", Reason: fmt.Sprintf("must not hold control characters, got %q", s.label)}
	}
	return nil
}

// labelArg returns the label argument of the acquire scripts for a new hold made with
// ctx under s: "<Locker ID> <text>[ trace <trace ID>]", or nil without Label.
func (l *Locker) labelArg(ctx context.Context, s *settings) any {
	if s.label == "" {
		return nil
	}
	var b strings.Builder // one allocation: Grow, then String without a copy
	b.Grow(len(l.id) + 1 + len(s.label) + len(" trace ") + 32)
	b.WriteString(l.id)
	b.WriteByte(' ')
	b.WriteString(s.label)
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		tid := sc.TraceID()
		b.WriteString(" trace ")
		b.WriteString(tid.String())
	}
	return b.String()
}

// parseLabel splits a stored label into the Locker's ID, the text and the trace ID.
func parseLabel(v string) (locker, text, traceID string) {
	locker, text, _ = strings.Cut(v, " ")
	if i := strings.LastIndex(text, " trace "); i >= 0 && len(text)-i == len(" trace ")+32 {
		text, traceID = text[:i], text[i+len(" trace "):]
	}
	return locker, text, traceID
}
