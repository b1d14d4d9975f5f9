// Command keyring, for the isolation tests, puts a key in the session
// keyring (add NAME VALUE) or reads one found there (read NAME).
package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func main() {
	switch {
	case len(os.Args) == 4 && os.Args[1] == "add":
		id, err := unix.AddKey("user", os.Args[2], []byte(os.Args[3]), unix.KEY_SPEC_SESSION_KEYRING)
		if err != nil {
			fmt.Println("add:", err)
			os.Exit(1)
		}
		fmt.Println("added", id)
	case len(os.Args) == 3 && os.Args[1] == "read":
		id, err := unix.KeyctlSearch(unix.KEY_SPEC_SESSION_KEYRING, "user", os.Args[2], 0)
		if err != nil {
			fmt.Println("search:", err)
			os.Exit(1)
		}
		buf := make([]byte, 256)
		n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, buf, 0)
		if err != nil {
			fmt.Println("read:", err)
			os.Exit(1)
		}
		fmt.Printf("value %s\n", buf[:min(n, len(buf))])
	default:
		fmt.Println("usage: keyring add NAME VALUE | read NAME")
		os.Exit(2)
	}
}
