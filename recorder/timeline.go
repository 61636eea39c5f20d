package recorder

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// WriteTimeline draws records as a timeline, a row per rank and stream
// and a bar per call coloured by kind, and saves it to path (the
// extension picks the format: .png, .svg, .pdf).
func WriteTimeline(path string, recs []*Record) error {
	tracks, slices, _ := Timeline(recs)
	if len(slices) == 0 {
		return fmt.Errorf("recorder: timeline: no call to draw")
	}
	p := plot.New()
	p.Title.Text = "goccl calls"
	p.X.Label.Text = "time (ms)"
	p.Y.Tick.Marker = trackTicks(tracks)
	p.Y.Min, p.Y.Max = -0.6, float64(len(tracks))-0.4
	p.Add(plotter.NewGrid())
	used := map[Kind]bool{}
	for _, s := range slices {
		used[s.Kind] = true
	}
	for k := Kind(0); k < numKinds; k++ {
		if !used[k] {
			continue
		}
		b := &bars{color: plotutil.Color(int(k))}
		for _, s := range slices {
			if s.Kind == k {
				b.add(s)
			}
		}
		p.Add(b)
		p.Legend.Add(k.String(), b)
	}
	p.Legend.Top = true
	h := vg.Length(max(3, len(tracks))) * 0.5 * vg.Inch
	if err := p.Save(10*vg.Inch, h+1.5*vg.Inch, path); err != nil {
		return fmt.Errorf("recorder: timeline: %w", err)
	}
	return nil
}

// bars is one kind's calls: a rectangle each, from start to end in
// milliseconds, centred on its track's row.
type bars struct {
	color color.Color
	x0    []float64
	x1    []float64
	y     []float64
}

func (b *bars) add(s Slice) {
	b.x0 = append(b.x0, float64(s.Start)/1e6)
	b.x1 = append(b.x1, float64(s.End)/1e6)
	b.y = append(b.y, float64(s.Track))
}

// Plot implements plot.Plotter. A call too short to see gets a hairline.
func (b *bars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for i := range b.x0 {
		x0, x1 := trX(b.x0[i]), trX(b.x1[i])
		if x1-x0 < 1 {
			x1 = x0 + 1
		}
		y0, y1 := trY(b.y[i]-0.35), trY(b.y[i]+0.35)
		pts := []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}
		c.FillPolygon(b.color, c.ClipPolygonXY(pts))
	}
}

// DataRange implements plot.DataRanger.
func (b *bars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, ymin = b.x0[0], b.y[0]
	xmax, ymax = b.x1[0], b.y[0]
	for i := range b.x0 {
		xmin, xmax = min(xmin, b.x0[i]), max(xmax, b.x1[i])
		ymin, ymax = min(ymin, b.y[i]), max(ymax, b.y[i])
	}
	return xmin, xmax, ymin, ymax
}

// Thumbnail implements plot.Thumbnailer, for the legend.
func (b *bars) Thumbnail(c *draw.Canvas) {
	pts := []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}}
	c.FillPolygon(b.color, c.ClipPolygonY(pts))
}

// trackTicks labels the rows with their tracks.
type trackTicks []Track

func (t trackTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for i, tr := range t {
		out = append(out, plot.Tick{Value: float64(i), Label: tr.Name()})
	}
	return out
}
