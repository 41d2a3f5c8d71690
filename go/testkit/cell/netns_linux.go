package cell

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// netnsDialer returns a dialer whose connections are made inside the
// network namespace name (one of `ip netns`, under /run/netns). A socket
// belongs to the namespace it was created in, so the dialing thread
// enters the namespace for the socket call alone and then goes back.
func netnsDialer(name string) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		target, err := os.Open("/run/netns/" + name)
		if err != nil {
			return nil, err
		}
		defer target.Close()
		runtime.LockOSThread()
		own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			return nil, err
		}
		defer own.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			return nil, fmt.Errorf("enter network namespace %s: %w", name, err)
		}
		var d net.Dialer
		conn, dialErr := d.DialContext(ctx, "tcp", addr)
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays in the wrong namespace: keep it locked, so
			// that it ends with this goroutine and no other runs on it.
			panic(fmt.Sprintf("cell: cannot leave network namespace %s: %v", name, err))
		}
		runtime.UnlockOSThread()
		return conn, dialErr
	}
}
