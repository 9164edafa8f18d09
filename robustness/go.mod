module github.com/stampede-go/stampede/robustness

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/go-chi/chi/v5 v5.5.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stampede-go/stampede v0.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/stampede-go/stampede => ../
