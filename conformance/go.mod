module github.com/monolock/monolock/conformance

go 1.26.0

require github.com/monolock/monolock/go v0.0.0

replace github.com/monolock/monolock/go => ../go
