module meshd

go 1.26.0

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/ardanlabs/jinja v1.8.0
	github.com/coreos/go-systemd/v22 v22.7.0
	github.com/fxamacker/cbor/v2 v2.10.0
	github.com/pelletier/go-toml/v2 v2.4.3
	github.com/prometheus/client_golang v1.25.0
	github.com/tarm/serial v0.0.0-20180830185346-98f6abe2eb07
	github.com/veraison/go-cose v1.3.0
	golang.org/x/sys v0.50.0
	lukechampine.com/blake3 v1.4.1
	periph.io/x/conn/v3 v3.7.3
	periph.io/x/host/v3 v3.8.5
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/klauspost/cpuid/v2 v2.0.9 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
