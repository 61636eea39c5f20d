// Command gradavg is data-parallel training reduced to its communication:
// every rank computes gradients on its own shard of the data, one
// AllReduce(Avg) gives every rank the mean gradient, and every replica
// applies the same update, so the copies of the model stay identical.
//
//	goccl run -np 4 go run ./examples/gradavg
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/goccl/goccl/comm"
)

func main() {
	params := flag.Int("params", 1<<16, "number of model parameters")
	steps := flag.Int("steps", 10, "training steps")
	lr := flag.Float64("lr", 0.5, "learning rate")
	flag.Parse()
	if err := train(context.Background(), *params, *steps, float32(*lr)); err != nil {
		fmt.Fprintln(os.Stderr, "gradavg:", err)
		os.Exit(1)
	}
}

func train(ctx context.Context, params, steps int, lr float32) error {
	if params < 1 || steps < 0 {
		return errors.New("need -params >= 1 and -steps >= 0")
	}
	// The launcher (goccl run, torchrun, mpirun, srun) tells each rank who
	// it is and where rank 0 listens. This example keeps its tensors in
	// host memory, so it asks for the host backend. On GPUs, leave Backend
	// empty (auto) and pass your framework's device pointers and CUDA
	// stream to c.AllReduce instead.
	c, err := comm.InitFromEnv(ctx, comm.Options{Backend: comm.BackendHost})
	if err != nil {
		return err
	}
	defer c.Close()
	rank, nranks := c.Rank(), c.Size()

	// The model starts identical on every rank (here: zeros).
	w := make([]float32, params)
	grad := make([]float32, params)
	// This rank's shard of the data: the values its examples pull the
	// model towards. Each rank sees different data.
	target := make([]float32, params)
	for i := range target {
		target[i] = float32((i + rank) % 8)
	}

	for step := 0; step < steps; step++ {
		// Backward pass: the gradient of 0.5·|w - target|² on this shard.
		for i := range grad {
			grad[i] = w[i] - target[i]
		}
		// In place (send == recv): grad becomes the mean over all ranks.
		// Go slices go through the typed calls, which check the lengths
		// and keep the slices on the heap; device memory goes through
		// c.AllReduce with the pointers and the caller's CUDA stream.
		if err := comm.AllReduceSlice(ctx, c, grad, grad, comm.Avg); err != nil {
			// A dead or hung peer ends here with an error naming it.
			return fmt.Errorf("rank %d, step %d: %w", rank, step, err)
		}
		// Optimizer step: the same update on every replica.
		for i := range w {
			w[i] -= lr * grad[i]
		}
	}

	var checksum float64
	for _, v := range w {
		checksum += float64(v)
	}
	fmt.Printf("rank %d of %d: %d steps, %d params, checksum %.6f, w[:4] = %v\n",
		rank, nranks, steps, params, checksum, w[:min(4, params)])
	return nil
}
