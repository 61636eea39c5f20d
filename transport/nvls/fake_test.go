package nvls

import (
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport/nvls/nvlstest"
)

// fakeDriver is one rank of the fake multicast node of nvlstest, naming
// MemMap, MemUnmap and MemRelease by handle kind ("MemMap mc") so that the
// tests can check the exact order of Setup and Close.
type fakeDriver struct {
	*nvlstest.Driver
	unused
}

// unused takes every method goccl's NVLS path must not use: the nil
// driver panics. One level deeper than nvlstest.Driver's methods, it
// never shadows them.
type unused struct{ cuda.Driver }

func newFakeDriver(n *nvlstest.Node, rank int) *fakeDriver {
	d := nvlstest.NewDriver(n, rank)
	d.TagKinds = true
	return &fakeDriver{Driver: d}
}
