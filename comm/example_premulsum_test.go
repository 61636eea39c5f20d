package comm_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/goccl/goccl/comm"
)

// Three ranks average over the 4 samples they hold between them (1 + 1 +
// 2), not over the 3 ranks: each scales its sum by its share, 1/4 per
// sample, with a PreMulSum op of its own.
func ExampleComm_CreatePreMulSum() {
	ctx := context.Background()
	comms, err := comm.InitAll(ctx, []int{0, 1, 2}, comm.Options{Backend: comm.BackendHost})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll(comms)

	sums := [][]float32{{4, 8}, {0, 4}, {8, 4}} // each rank's sum over its samples
	errs := eachRank(comms, func(c *comm.Comm) error {
		s, err := comm.ScalarOf(comm.Float32, 0.25) // the scalar is copied now
		if err != nil {
			return err
		}
		op, err := c.CreatePreMulSum(s, comm.Float32)
		if err != nil {
			return err
		}
		defer c.DestroyOp(op)
		g := sums[c.Rank()]
		err = c.AllReduce(ctx, ptr(g), ptr(g), len(g), comm.Float32, op, 0)
		runtime.KeepAlive(g)
		return err
	})
	fmt.Println(errors.Join(errs...), sums[0])
	// Output: <nil> [3 4]
}
