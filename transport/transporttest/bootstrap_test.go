package transporttest

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

func TestAllGatherAndFDs(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		g := NewGroup(n)
		err := g.Run(func(rank int, b transport.Bootstrap) error {
			ctx := context.Background()
			for round := 0; round < 3; round++ {
				all, err := b.AllGather(ctx, []byte{byte(rank), byte(round)})
				require.NoError(t, err)
				for r := range all {
					require.Equal(t, []byte{byte(r), byte(round)}, all[r])
				}
			}
			f, err := os.CreateTemp(t.TempDir(), "fd")
			require.NoError(t, err)
			defer f.Close()
			_, err = f.Write([]byte{byte(rank)})
			require.NoError(t, err)
			got, err := transport.ExchangeFDs(ctx, b, []int{int(f.Fd())})
			require.NoError(t, err)
			for r := range got {
				buf := make([]byte, 1)
				_, err := unix.Pread(got[r][0], buf, 0)
				require.NoError(t, err)
				require.Equal(t, byte(r), buf[0])
				if r != rank {
					unix.Close(got[r][0])
				}
			}
			return b.Barrier(ctx)
		})
		require.NoError(t, err)
	}
}
