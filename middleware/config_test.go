package middleware_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/keyfunc"
	"github.com/guardkit/guardkit/middleware"
)

// offlineLocker returns a Locker whose client is never used: configuration is checked
// without Redis.
func offlineLocker(t *testing.T, opts ...guard.Option) *guard.Locker {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	l, err := guard.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestConfigErrors(t *testing.T) {
	locker := offlineLocker(t)
	slowRenewal := offlineLocker(t, guard.Renewal(10*time.Second, 0))
	ok := func(c echo.Context) (string, error) { return "x", nil }

	for _, tc := range []struct {
		name   string
		config middleware.LockConfig
		field  string
		is     error // also in the chain, when set
	}{
		{"no Locker", middleware.LockConfig{Key: "order:{param.id}"}, "Locker", nil},
		{"no Key", middleware.LockConfig{Locker: locker}, "Key", nil},
		{"unclosed placeholder", middleware.LockConfig{Locker: locker, Key: "order:{param.id"}, "Key", keyfunc.ErrSyntax},
		{"unknown source", middleware.LockConfig{Locker: locker, Key: "order:{cookie.id}"}, "Key", keyfunc.ErrUnknownSource},
		{"param without name", middleware.LockConfig{Locker: locker, Key: "order:{param}"}, "Key", nil},
		{"method with path", middleware.LockConfig{Locker: locker, Key: "{method.x}"}, "Key", nil},
		{"extractor with path", middleware.LockConfig{Locker: locker, Key: "{user.id}",
			Extractors: map[string]middleware.Extractor{"user": ok}}, "Key", nil},
		{"adjacent placeholders", middleware.LockConfig{Locker: locker, Key: "{method}{path}"}, "Key", keyfunc.ErrSyntax},
		{"negative TTL", middleware.LockConfig{Locker: locker, Key: "k", TTL: -time.Second}, "TTL", nil},
		{"TTL below 1ms", middleware.LockConfig{Locker: locker, Key: "k", TTL: time.Microsecond}, "TTL", guard.ErrInvalidConfig},
		{"TTL below the Locker's renewal", middleware.LockConfig{Locker: slowRenewal, Key: "k", TTL: time.Second,
			Options: []guard.Option{guard.MaxHold(time.Minute)}}, "TTL", guard.ErrInvalidConfig},
		{"Locker-only option", middleware.LockConfig{Locker: locker, Key: "k",
			Options: []guard.Option{guard.Prefix("app:")}}, "Options", guard.ErrInvalidConfig},
		{"bad option value", middleware.LockConfig{Locker: locker, Key: "k",
			Options: []guard.Option{guard.MaxHold(-time.Second)}}, "Options", guard.ErrInvalidConfig},
		{"SkipIf option", middleware.LockConfig{Locker: locker, Key: "k",
			Options: []guard.Option{guard.SkipIf(func(context.Context, string) bool { return true })}}, "Options", guard.ErrInvalidConfig},
		{"extractor name syntax", middleware.LockConfig{Locker: locker, Key: "k",
			Extractors: map[string]middleware.Extractor{"User": ok}}, "Extractors", nil},
		{"extractor shadows a source", middleware.LockConfig{Locker: locker, Key: "k",
			Extractors: map[string]middleware.Extractor{"param": ok}}, "Extractors", nil},
		{"nil extractor", middleware.LockConfig{Locker: locker, Key: "k",
			Extractors: map[string]middleware.Extractor{"user": nil}}, "Extractors", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := tc.config.ToMiddleware()
			var ce *middleware.ConfigError
			if mw != nil || !errors.As(err, &ce) {
				t.Fatalf("ToMiddleware: %v, want a *ConfigError", err)
			}
			if ce.Field != tc.field {
				t.Errorf("field %q, want %q (%v)", ce.Field, tc.field, err)
			}
			if prefix := "middleware: invalid configuration: " + tc.field + ": "; !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("message %q does not start with %q", err, prefix)
			}
			if !errors.Is(err, guard.ErrInvalidConfig) {
				t.Errorf("%v does not match guard.ErrInvalidConfig", err)
			}
			if tc.is != nil && !errors.Is(ce.Err, tc.is) {
				t.Errorf("cause %v does not match %v", ce.Err, tc.is)
			}

			defer func() {
				if p, _ := recover().(*middleware.ConfigError); p == nil || p.Field != tc.field {
					t.Errorf("LockWithConfig panicked with %v, want the *ConfigError", p)
				}
			}()
			middleware.LockWithConfig(tc.config)
		})
	}
}

func TestConfigValid(t *testing.T) {
	locker := offlineLocker(t)
	for _, c := range []middleware.LockConfig{
		{Locker: locker, Key: "static"},
		{Locker: locker, Key: "order:{param.id}", TTL: time.Second, MaxWait: -1},
		{Locker: locker, Key: "{method}:{route}:{user}", MaxWait: time.Second,
			Extractors: map[string]middleware.Extractor{"user": func(echo.Context) (string, error) { return "u", nil }},
			Options:    []guard.Option{guard.Renewal(100*time.Millisecond, 0), guard.MaxHold(time.Minute)}},
		// Key and Locker override the options that name a key or a Locker.
		{Locker: locker, Key: "order:{param.id}", Options: []guard.Option{guard.Key("other:{req.ID}"),
			guard.RawKey(""), guard.KeyFunc(func(context.Context, string) (string, error) { return "", nil }),
			guard.Use(offlineLocker(t))}},
	} {
		if _, err := c.ToMiddleware(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if mw := middleware.Lock(locker, "order:{param.id}"); mw == nil {
		t.Error("Lock returned nil")
	}
}
