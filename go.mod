module github.com/monolock/monolock

go 1.26.0

require github.com/magefile/mage v1.17.2
