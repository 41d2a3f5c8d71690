// Package readyfile is the schema of the file that `monolock serve
// --ready-file` writes once it listens (docs/operating.md, "The ready
// file"): one declaration, for the server that writes it and for every Go
// harness that reads it (testkit/launch, as launch.Ready).
package readyfile

// Info is the one JSON object of a ready file.
type Info struct {
	LockAddr  string `json:"lock_addr"`  // the bound lock protocol address
	AdminAddr string `json:"admin_addr"` // the bound admin API address; "" when it is not running
	PID       int    `json:"pid"`
	Version   string `json:"version"`
}
