package httpguard_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/httpguard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/keyfunc"
)

// TestConfigErrors: every mistake that needs no request fails when the middleware is
// built, with a *ConfigError naming the field and matching guard.ErrInvalidConfig, and
// LockWithConfig panics with it.
func TestConfigErrors(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	ex := func(*http.Request) (string, error) { return "u", nil }
	for _, tc := range []struct {
		name   string
		config httpguard.LockConfig
		field  string
		want   error
	}{
		{"no locker", httpguard.LockConfig{Key: "k"}, "Locker", nil},
		{"no key", httpguard.LockConfig{Locker: locker}, "Key", nil},
		{"bad template", httpguard.LockConfig{Locker: locker, Key: "order:{path.id"}, "Key", keyfunc.ErrSyntax},
		{"unknown source", httpguard.LockConfig{Locker: locker, Key: "order:{param.id}"}, "Key", nil},
		{"path without a name", httpguard.LockConfig{Locker: locker, Key: "order:{path}"}, "Key", nil},
		{"negative TTL", httpguard.LockConfig{Locker: locker, Key: "k", TTL: -time.Second}, "TTL", nil},
		{"TTL below renewal", httpguard.LockConfig{Locker: locker, Key: "k", TTL: time.Nanosecond}, "TTL", nil},
		{"bad option", httpguard.LockConfig{Locker: locker, Key: "k", Options: []guard.Option{guard.Permits(0)}}, "Options", nil},
		{"extractor name", httpguard.LockConfig{Locker: locker, Key: "k", Extractors: map[string]httpguard.Extractor{"User": ex}}, "Extractors", nil},
		{"extractor shadows", httpguard.LockConfig{Locker: locker, Key: "k", Extractors: map[string]httpguard.Extractor{"query": ex}}, "Extractors", nil},
		{"nil extractor", httpguard.LockConfig{Locker: locker, Key: "k", Extractors: map[string]httpguard.Extractor{"user": nil}}, "Extractors", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.config.ToMiddleware()
			var ce *httpguard.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, guard.ErrInvalidConfig) {
				t.Fatalf("error %v, want a *ConfigError for %s matching guard.ErrInvalidConfig", err, tc.field)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v does not match %v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "httpguard: invalid configuration: "+tc.field+": ") {
				t.Errorf("message %q", err)
			}
			defer func() {
				if p, _ := recover().(error); !errors.Is(p, guard.ErrInvalidConfig) {
					t.Errorf("LockWithConfig panicked with %v", p)
				}
			}()
			httpguard.LockWithConfig(tc.config)
		})
	}
	if _, err := (httpguard.LockConfig{Locker: locker, Key: "user:{user}:{query.q}:{header.X-T}:{route}:{method}:{path.id}",
		Extractors: map[string]httpguard.Extractor{"user": ex}}).ToMiddleware(); err != nil {
		t.Errorf("every source: %v", err)
	}
}
