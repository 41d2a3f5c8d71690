module github.com/monolock/monolock/mobile

go 1.26.0

require (
	github.com/monolock/monolock/go v0.0.0
	golang.org/x/mobile v0.0.0-20261011034528-197770444867
)

require (
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/tools v0.52.0 // indirect
)

replace github.com/monolock/monolock/go => ../go

tool golang.org/x/mobile/cmd/gobind
