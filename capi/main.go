//go:build cgo

package main

/*
#cgo CFLAGS: -I${SRCDIR}/../include -O2 -fvisibility=hidden
#cgo LDFLAGS: -ldl -lpthread
*/
import "C"

func main() {}
