//go:build unix

package runcmd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/monolock/monolock/go/internal/termtext"
)

// humanHandler writes one plain line per record for a person reading
// stderr: "monolock run: MESSAGE: ERROR", or "monolock run: ERROR" when the
// message is empty or the error's text starts with it. Other attributes
// are left out (--log-format json has them all), and so is the client's
// own prefix.
type humanHandler struct {
	mu    *sync.Mutex
	w     io.Writer
	level slog.Level
	err   string // an "err" attribute given by WithAttrs
}

func newHumanHandler(w io.Writer, level slog.Level) *humanHandler {
	return &humanHandler{mu: new(sync.Mutex), w: w, level: level}
}

func (h *humanHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *humanHandler) Handle(_ context.Context, r slog.Record) error {
	msg := bare(r.Message)
	errText := h.err
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			errText = bare(a.Value.String())
		}
		return true
	})
	switch {
	case errText == "":
	case msg == "" || strings.HasPrefix(errText, msg):
		msg = errText // "lock lost" and "lock lost: closed by administrator (0x02)" say it once
	default:
		msg += ": " + errText
	}
	// The message may carry others' text (a server's reason, a
	// process's name): escaped, it stays one line of text.
	line := "monolock run: " + termtext.Line(msg)
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := fmt.Fprintln(h.w, line)
	return err
}

func (h *humanHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
	for _, a := range attrs {
		if a.Key == "err" {
			h2.err = a.Value.String()
		}
	}
	return &h2
}

func (h *humanHandler) WithGroup(string) slog.Handler { return h }

// bare is an error's text without the client's "monolock: " prefix, which
// the line already has in its own form.
func bare(text string) string { return strings.TrimPrefix(text, "monolock: ") }
