package admin

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// EvictAfter is how long a connection of the admin API may wait for its
// next request before a new connection may take its place when every
// place is taken (see LimitListener). A client sends its request as soon
// as it has connected (a probe, the monolock commands, a browser), far
// sooner than this on a loaded machine.
const EvictAfter = 200 * time.Millisecond

// LimitListener lets at most max connections be open at once, so that the
// admin port can never take the lock port's file descriptors. It counts
// before TLS or HTTP see a connection, so a peer need not authenticate to
// be counted, and cannot stay uncounted by not doing so.
//
// A peer that needs no token could then take every place and keep it, by
// opening connections and sending nothing (or a byte at a time), and a
// health probe would find no place: the orchestrator would restart a
// healthy server, and every holder would lose its lock. So when every
// place is taken, a new connection takes the place of the connection that
// has waited longest for its next request (not the ones inside a request,
// see ConnContext), if that one has waited at least evictAfter; only when
// none has is the new one closed at once. A hog's idle connections are
// displaced by each probe, and a probe, which sends its request at once,
// is never the one displaced. Nothing waits in a queue: the port holds at
// most max+1 descriptors. dropped (if not nil) is called for each
// connection closed so, the new one or the displaced one.
func LimitListener(ln net.Listener, max int, evictAfter time.Duration, dropped func()) net.Listener {
	return &limitListener{Listener: ln, max: max, evictAfter: evictAfter, dropped: dropped, open: map[*limitedConn]struct{}{}}
}

type limitListener struct {
	net.Listener
	max        int
	evictAfter time.Duration
	dropped    func()
	mu         sync.Mutex
	open       map[*limitedConn]struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		now := time.Now()
		l.mu.Lock()
		var displaced *limitedConn
		if len(l.open) >= l.max {
			displaced = l.longestWaitingLocked(now)
			if displaced == nil {
				l.mu.Unlock()
				l.drop() // counted before the peer can see the close
				c.Close()
				continue
			}
			delete(l.open, displaced) // its place is the new one's
		}
		lc := &limitedConn{Conn: c, l: l, waitingSince: now}
		l.open[lc] = struct{}{}
		l.mu.Unlock()
		if displaced != nil {
			l.drop()
			displaced.Conn.Close()
		}
		return lc, nil
	}
}

// longestWaitingLocked returns the open connection outside a request that
// has waited longest, at least evictAfter; nil if there is none.
func (l *limitListener) longestWaitingLocked(now time.Time) *limitedConn {
	var oldest *limitedConn
	for c := range l.open {
		if c.inRequest == 0 && now.Sub(c.waitingSince) >= l.evictAfter &&
			(oldest == nil || c.waitingSince.Before(oldest.waitingSince)) {
			oldest = c
		}
	}
	return oldest
}

func (l *limitListener) drop() {
	if l.dropped != nil {
		l.dropped()
	}
}

// limitedConn is one counted connection. Its fields but Conn are guarded
// by its listener's mu.
type limitedConn struct {
	net.Conn
	l            *limitListener
	once         sync.Once
	inRequest    int       // requests being handled on it now
	waitingSince time.Time // since when it waits for a request
}

// Close gives its place back once.
func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.open, c)
		c.l.mu.Unlock()
	})
	return err
}

func (c *limitedConn) enterRequest() {
	c.l.mu.Lock()
	c.inRequest++
	c.l.mu.Unlock()
}

func (c *limitedConn) leaveRequest() {
	c.l.mu.Lock()
	c.inRequest--
	c.waitingSince = time.Now()
	c.l.mu.Unlock()
}

type connKey struct{}

// ConnContext is the http.Server's ConnContext for a LimitListener: it
// lets Handler tell the listener when a connection is inside a request,
// where no new connection may displace it.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	for {
		switch v := c.(type) {
		case *limitedConn:
			return context.WithValue(ctx, connKey{}, v)
		case interface{ NetConn() net.Conn }: // TLS, the not-HTTP sniffer
			c = v.NetConn()
		default:
			return ctx
		}
	}
}

// inRequest marks the request's connection as inside a request while next
// handles it.
func inRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*limitedConn); ok {
			c.enterRequest()
			defer c.leaveRequest()
		}
		next.ServeHTTP(w, r)
	})
}
