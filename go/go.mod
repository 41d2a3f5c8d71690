module github.com/monolock/monolock/go

go 1.24.0

require (
	github.com/stretchr/testify v1.12.1 // indirect
	go.uber.org/goleak v1.3.0 // indirect
)
