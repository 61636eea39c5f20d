package recorder

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Source is what the Prometheus collector reads: a ring's statistics and
// what it records.
type Source interface {
	Stats() []Stat
	Meta() Meta
}

var _ Source = (*Ring)(nil)

// Collector exports the statistics of the rings sources returns at each
// scrape; it costs the calls nothing.
type Collector struct {
	sources                  func() []Source
	calls, bytes, dur, busbw *prometheus.Desc
	link, linkFrac           *prometheus.Desc
}

// NewCollector returns a collector over sources.
func NewCollector(sources func() []Source) *Collector {
	labels := []string{"comm", "rank", "call", "size_class"}
	return &Collector{
		sources: sources,
		calls:   prometheus.NewDesc("goccl_calls_total", "Calls that finished, by kind and size class (bytes, a power of two: the calls of more than half of it up to it).", labels, nil),
		bytes:   prometheus.NewDesc("goccl_bytes_total", "Bytes of the calls that finished (nccl-tests' size of each call).", labels, nil),
		dur:     prometheus.NewDesc("goccl_call_duration_seconds", "Time from start to finish of each call.", labels, nil),
		busbw:   prometheus.NewDesc("goccl_busbw_gbps", "Bus bandwidth (nccl-tests' factors) over all the calls' time, GB/s.", labels, nil),
		link: prometheus.NewDesc("goccl_link_ceiling_gbps", "Nominal bandwidth per direction of the slowest link between the node's GPUs (goccl info's), GB/s; absent when unknown.",
			[]string{"comm", "rank"}, nil),
		linkFrac: prometheus.NewDesc("goccl_busbw_link_fraction", "goccl_busbw_gbps over goccl_link_ceiling_gbps; absent when the ceiling is unknown.", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.calls
	ch <- c.bytes
	ch <- c.dur
	ch <- c.busbw
	ch <- c.link
	ch <- c.linkFrac
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.sources() {
		if s == nil {
			continue
		}
		sts := s.Stats() // first: it may learn the link ceiling
		m := s.Meta()
		if m.LinkGBs > 0 {
			ch <- prometheus.MustNewConstMetric(c.link, prometheus.GaugeValue, m.LinkGBs, m.Comm, strconv.Itoa(m.Rank))
		}
		for _, st := range sts {
			lv := []string{m.Comm, strconv.Itoa(m.Rank), st.Call, strconv.FormatInt(st.SizeClass, 10)}
			ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(st.Count), lv...)
			ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(st.Bytes), lv...)
			ch <- prometheus.MustNewConstMetric(c.busbw, prometheus.GaugeValue, st.BusBW, lv...)
			if st.Link > 0 {
				ch <- prometheus.MustNewConstMetric(c.linkFrac, prometheus.GaugeValue, st.LinkFraction, lv...)
			}
			buckets := make(map[float64]uint64, len(st.Bounds))
			for i, b := range st.Bounds {
				buckets[b.Seconds()] = st.Buckets[i]
			}
			ch <- prometheus.MustNewConstHistogram(c.dur, st.Count, st.Total.Seconds(), buckets, lv...)
		}
	}
}
