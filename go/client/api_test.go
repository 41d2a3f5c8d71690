package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPublicSurface pins what the package exports, so that a change to the
// API is a deliberate edit of this list (other clients mirror it).
func TestPublicSurface(t *testing.T) {
	want := []string{
		"AcquireOption",
		"Client", "Client.Acquire", "Client.Campaign", "Client.Leader", "Client.Lease", "Client.Observe", "Client.Session", "Client.TryAcquire", "Client.Watch",
		"DefaultDialTimeout", "DefaultLease", "DefaultServer",
		"ErrBusy", "ErrClientTimeout", "ErrLockLost", "ErrProtocol", "ErrReleased", "ErrServerEnded", "ErrSessionClosed", "ErrSessionUnsupported", "ErrSharedUnsupported", "ErrUnavailable", "ErrValueUnsupported",
		"Holder",
		"LeaderHeldBack",
		"LeaderState", "LeaderState.String",
		"LeaderUnknown",
		"Leading",
		"Limit",
		"Lock", "Lock.Context", "Lock.Done", "Lock.Err", "Lock.LeaseEnd", "Lock.Name", "Lock.Proclaim", "Lock.Release", "Lock.Token", "Lock.ValidUntil",
		"LockState",
		"New",
		"NewPool",
		"NoLeader",
		"Observation",
		"Option",
		"Pool", "Pool.Acquire", "Pool.Close", "Pool.TryAcquire",
		"ServerError", "ServerError.Error", "ServerError.Is", "ServerError.Temporary",
		"Session", "Session.Acquire", "Session.Campaign", "Session.Close", "Session.Done", "Session.Err", "Session.MaxStreams", "Session.Observe", "Session.TryAcquire", "Session.ValidUntil", "Session.Watch",
		"Shared",
		"TLSFiles", "TLSFromFiles", "TLSFromPEM",
		"Term", "Term.Resign",
		"Value",
		"Waiter",
		"Watch", "Watch.Changed", "Watch.Close", "Watch.Done", "Watch.Err", "Watch.Leader", "Watch.Name", "Watch.State",
		"WithDialTimeout", "WithLease", "WithLogger", "WithOnWaiting", "WithServers", "WithTLS",
	}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	require.NoError(t, err)
	var got []string
	for _, f := range pkgs["client"].Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				name := d.Name.Name
				if d.Recv != nil {
					typ := d.Recv.List[0].Type
					if star, ok := typ.(*ast.StarExpr); ok {
						typ = star.X
					}
					recv := typ.(*ast.Ident)
					if !recv.IsExported() {
						continue
					}
					name = recv.Name + "." + name
				}
				got = append(got, name)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							got = append(got, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								got = append(got, n.Name)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(got)
	require.Equal(t, want, got)
}
