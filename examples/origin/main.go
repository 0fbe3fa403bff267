// Command origin is the quick start's local web site: a page to allow and
// a login form to deny, on 127.0.0.1:8080 (or -listen), so egressd can be
// tried on a machine with no internet.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello from the local origin")
	})
	mux.HandleFunc("/login", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "a login form: egressd should never let an agent reach this")
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("origin: serving on http://%s/", *listen)
	log.Fatal(srv.ListenAndServe())
}
