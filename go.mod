module meshd

go 1.26.0

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/ardanlabs/jinja v1.8.0
	github.com/fxamacker/cbor/v2 v2.10.0
	github.com/tarm/serial v0.0.0-20180830185346-98f6abe2eb07
	github.com/veraison/go-cose v1.3.0
	golang.org/x/sys v0.50.0
	lukechampine.com/blake3 v1.4.1
	periph.io/x/conn/v3 v3.7.3
	periph.io/x/host/v3 v3.8.5
)

require (
	github.com/klauspost/cpuid/v2 v2.0.9 // indirect
	github.com/x448/float16 v0.8.4 // indirect
)
