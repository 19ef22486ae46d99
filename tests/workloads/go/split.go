// A Go CPU burner at a known 70:30 split: hotA does 70 units of work for
// every 30 of hotB until os.Args[1] seconds have passed; "ready" on stdout
// once in the loop. Built stripped (-ldflags='-s -w'): no .symtab, only the
// runtime's own .gopclntab names its functions.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

var sink uint64

// spin keeps a frame (its buffer is on the stack), so that Go saves the
// frame pointer in it: a frameless leaf would hide its caller from a
// frame-pointer walk.
//
//go:noinline
func spin(n int) uint64 {
	var buf [16]uint64
	acc := sink
	for i := 0; i < n; i++ {
		acc = acc*2862933555777941757 + uint64(i)
		buf[i&15] ^= acc
	}
	return acc ^ buf[n&15]
}

//go:noinline
func hotA() { sink ^= spin(70000) }

//go:noinline
func hotB() { sink ^= spin(30000) }

func main() {
	seconds, err := strconv.ParseFloat(os.Args[1], 64)
	if err != nil {
		seconds = 10
	}
	end := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	ready := false
	for time.Now().Before(end) {
		for round := 0; round < 10; round++ {
			hotA()
			hotB()
		}
		if !ready {
			fmt.Println("ready")
			ready = true
		}
	}
}
