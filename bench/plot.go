package bench

import (
	"fmt"
	"image/color"
	"math"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// WritePlot draws busbw (the better placement, Row.Best) against size
// (log2 axis) for every (type, op, root) series of each report, the first
// report solid and the others dashed, and saves it to path (the extension
// picks the format: .png, .svg, .pdf). The title says the placement; each
// legend entry the run, its backend and rank count, dtype and op.
func WritePlot(path string, reports ...Report) error {
	if len(reports) == 0 {
		return fmt.Errorf("bench: nothing to plot")
	}
	p := plot.New()
	p.Title.Text = plotTitle(reports[0])
	p.X.Label.Text = "size (bytes)"
	p.Y.Label.Text = "busbw (GB/s)"
	p.X.Scale = log2Scale{}
	p.X.Tick.Marker = log2Ticks{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())

	palette := []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}, {255, 127, 14, 255}, {23, 190, 207, 255}}
	idx := 0
	for ri, rep := range reports {
		series := map[string]plotter.XYs{}
		var keys []string
		for _, row := range rep.Rows {
			if row.Size <= 0 {
				continue // no place on a log axis
			}
			k := row.Type
			if row.RedOp != "none" {
				k += " " + row.RedOp
			}
			if row.Root >= 0 && rep.Collective != "all_reduce" {
				k += fmt.Sprintf(" root %d", row.Root)
			}
			if _, ok := series[k]; !ok {
				keys = append(keys, k)
			}
			series[k] = append(series[k], plotter.XY{X: float64(row.Size), Y: row.Best().BusBW})
		}
		sort.Strings(keys)
		for _, k := range keys {
			pts := series[k]
			sort.Slice(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
			line, marks, err := plotter.NewLinePoints(pts)
			if err != nil {
				return fmt.Errorf("bench: plot %s: %w", k, err)
			}
			c := palette[idx%len(palette)]
			idx++
			line.Color, marks.Color = c, c
			line.Width = vg.Points(1.5)
			if ri > 0 {
				line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
				marks.Shape = draw.TriangleGlyph{}
			}
			p.Add(line, marks)
			p.Legend.Add(seriesName(rep, ri, k), line, marks)
		}
	}
	if idx == 0 {
		return fmt.Errorf("bench: no row with a size above 0 to plot")
	}
	if err := p.Save(10*vg.Inch, 6*vg.Inch, path); err != nil {
		return fmt.Errorf("bench: save plot %s: %w", path, err)
	}
	return nil
}

// plotTitle says what is drawn: the collective and that each point is the
// better of the two placements (Row.Best).
func plotTitle(rep Report) string {
	return fmt.Sprintf("%s busbw (best of out-of-place and in-place per size)", rep.Collective)
}

// seriesName is a legend entry: the run's label, backend and rank count,
// then the series' dtype, op and root (key), e.g. "goccl (host, 2 ranks)
// float sum".
func seriesName(rep Report, index int, key string) string {
	name := rep.Label
	if name == "" {
		name = fmt.Sprintf("run %d", index+1)
	}
	var where []string
	if rep.Backend != "" {
		where = append(where, rep.Backend)
	}
	if rep.NRanks > 0 {
		unit := "ranks"
		if rep.NRanks == 1 {
			unit = "rank"
		}
		where = append(where, fmt.Sprintf("%d %s", rep.NRanks, unit))
	}
	if len(where) > 0 {
		name += " (" + strings.Join(where, ", ") + ")"
	}
	return strings.TrimSpace(name + " " + key)
}

// log2Scale maps sizes onto a base-2 logarithmic axis.
type log2Scale struct{}

func (log2Scale) Normalize(vmin, vmax, x float64) float64 {
	lo, hi := math.Log2(vmin), math.Log2(vmax)
	if hi == lo {
		return 0.5
	}
	return (math.Log2(x) - lo) / (hi - lo)
}

// log2Ticks labels powers of two with byte units, thinned to about ten.
type log2Ticks struct{}

func (log2Ticks) Ticks(vmin, vmax float64) []plot.Tick {
	lo, hi := int(math.Floor(math.Log2(vmin))), int(math.Ceil(math.Log2(vmax)))
	step := max(1, (hi-lo+9)/10)
	var ticks []plot.Tick
	for e := lo; e <= hi; e++ {
		t := plot.Tick{Value: math.Exp2(float64(e))}
		if (e-lo)%step == 0 {
			t.Label = byteLabel(int64(1) << e)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

func byteLabel(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%dG", b>>30)
	case b >= 1<<20:
		return fmt.Sprintf("%dM", b>>20)
	case b >= 1<<10:
		return fmt.Sprintf("%dK", b>>10)
	}
	return fmt.Sprintf("%d", b)
}
