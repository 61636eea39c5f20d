# goccl build entry points. `make test` is what CI runs (see .ci/run).
GO        ?= go
BIN       ?= bin
STATICCHECK_VERSION ?= v0.8.2
NP        ?= 4
BENCH_ARGS ?= all_reduce -b 8 -e 64M -f 4

.PHONY: build test lint bench kernels gpu-build clean libnccl

build:
	$(GO) build -o $(BIN)/goccl ./cmd/goccl

test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 40m ./...

# lint also builds and vets the module with CGO_ENABLED=0: programs that
# use only the host backend build without cgo (static binaries;
# docs/guide.md).
lint:
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) vet ./...

# libnccl.so.2: goccl behind NCCL's C API (include/nccl.h), for programs
# that link NCCL or load it with LD_PRELOAD. Only nccl*/pnccl* are exported.
LIBDIR ?= build/lib
libnccl:
	mkdir -p $(LIBDIR)
	$(GO) build -buildmode=c-shared -trimpath \
		-ldflags "-extldflags '-Wl,-soname,libnccl.so.2 -Wl,--version-script=$(CURDIR)/capi/exports.map'" \
		-o $(LIBDIR)/libnccl.so.2 ./capi
	rm -f $(LIBDIR)/libnccl.so.h
	ln -sf libnccl.so.2 $(LIBDIR)/libnccl.so

# The main job: the benchmark through the launcher (host backend where no
# GPU exists).
bench: build
	$(BIN)/goccl run -np $(NP) $(BIN)/goccl bench $(BENCH_ARGS)

# GPU machine only: compile kernels/*.cu into the committed fatbin.
kernels:
	bash kernels/build.sh

clean:
	rm -rf $(BIN) build
