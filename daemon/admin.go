package daemon

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminHandler serves /metrics, /healthz, /readyz and the quarantine API.
// It has no authentication: bind it to loopback (the default).
func (d *Daemon) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := d.Ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		w.Write([]byte(why + "\n"))
	})
	mux.HandleFunc("POST /quarantine/{identity}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("identity")
		n := d.px.Quarantine(id)
		writeJSON(w, map[string]any{"identity": id, "quarantined": true, "tunnels_closed": n})
	})
	mux.HandleFunc("DELETE /quarantine/{identity}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("identity")
		was := d.px.Lift(id)
		if !was {
			w.WriteHeader(http.StatusNotFound)
		}
		writeJSON(w, map[string]any{"identity": id, "quarantined": false, "was_quarantined": was})
	})
	mux.HandleFunc("GET /quarantine", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"quarantined": d.px.Quarantined()})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
