module github.com/monolock/monolock/conformance

go 1.26.0

require github.com/monolock/monolock/go v0.0.0

require (
	github.com/stretchr/testify v1.12.1
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace github.com/monolock/monolock/go => ../go
