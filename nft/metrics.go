package nft

import "github.com/prometheus/client_golang/prometheus"

// Collector exports the named counters of the walls (table inet <table>
// in namespace ns) at every scrape: what the walls dropped, by counter
// (drop_fwd, drop_out, ...). A table that cannot be read exports nothing,
// and egressd_walls_readable says so.
type Collector struct {
	ns             int
	table          string
	packets, bytes *prometheus.Desc
	readable       *prometheus.Desc
}

// NewCollector returns the collector for table in namespace ns.
func NewCollector(ns int, table string) *Collector {
	return &Collector{ns: ns, table: table,
		packets:  prometheus.NewDesc("egressd_walls_packets_total", "Packets counted by each named counter of the nftables walls.", []string{"counter"}, nil),
		bytes:    prometheus.NewDesc("egressd_walls_bytes_total", "Bytes counted by each named counter of the nftables walls.", []string{"counter"}, nil),
		readable: prometheus.NewDesc("egressd_walls_readable", "1 when the walls' table could be read at this scrape.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.packets
	ch <- c.bytes
	ch <- c.readable
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	counters, err := Counters(c.ns, c.table)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.readable, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.readable, prometheus.GaugeValue, 1)
	for name, v := range counters {
		ch <- prometheus.MustNewConstMetric(c.packets, prometheus.CounterValue, float64(v.Packets), name)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(v.Bytes), name)
	}
}
