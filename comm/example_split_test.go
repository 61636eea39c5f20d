package comm_test

import (
	"context"
	"fmt"
	"log"
	"sync"

	"github.com/goccl/goccl/comm"
)

// Four ranks in one process on the host backend split into odd and even
// ranks; each half sums its ranks' numbers, then the even half drops its
// rank 0 with Shrink (as a job does after a rank fails) and sums again.
func ExampleComm_Shrink() {
	ctx := context.Background()
	comms, err := comm.InitAll(ctx, make([]int, 4), comm.Options{Backend: comm.BackendHost, Env: map[string]string{}})
	if err != nil {
		log.Fatal(err)
	}
	sums := make([]int64, 4)
	shrunk := make([]int64, 4)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func(c *comm.Comm) {
			defer wg.Done()
			r := c.Rank()
			half, err := c.Split(ctx, r%2, r, comm.Options{})
			if err != nil {
				log.Fatal(err)
			}
			v := []int64{int64(r)}
			if err := half.AllReduce(ctx, ptr(v), ptr(v), 1, comm.Int64, comm.Sum, 0); err != nil {
				log.Fatal(err)
			}
			sums[r] = v[0]
			if r == 2 { // the even half's rank 1 survives its rank 0
				small, err := half.Shrink(ctx, []int{0}, comm.Options{})
				if err != nil {
					log.Fatal(err)
				}
				v[0] = int64(r)
				if err := small.AllReduce(ctx, ptr(v), ptr(v), 1, comm.Int64, comm.Sum, 0); err != nil {
					log.Fatal(err)
				}
				shrunk[r] = v[0]
				_ = small.Close()
			}
			_ = half.Close()
		}(c)
	}
	wg.Wait()
	for _, c := range comms {
		_ = c.Close()
	}
	fmt.Println("sums by parent rank:", sums)
	fmt.Println("after Shrink, rank 2 alone:", shrunk[2])
	// Output:
	// sums by parent rank: [2 4 2 4]
	// after Shrink, rank 2 alone: 2
}
