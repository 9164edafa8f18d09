package main

// The report's charts: the latency CDF and the origin calls per expiry of
// each strategy, as PNG files beside results.md.

import (
	"fmt"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// cdfChart draws each strategy's latency CDF, latency on a log axis.
func cdfChart(path, title string, results []Result) error {
	p := plot.New()
	p.Title.Text = "caller latency CDF — " + title
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "percentile"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	// The legend goes beside the plot, not over it: over it, it hid
	// no-cache's line, the slowest, in the bottom right corner.
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	p.Add(plotter.NewGrid())
	for i, r := range results {
		pts := make(plotter.XYs, 0, len(r.CDF))
		for _, c := range r.CDF {
			pts = append(pts, plotter.XY{X: math.Max(c.Ms, 0.001), Y: c.Percentile})
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i / 7)
		line.Width = vg.Points(1.5)
		p.Add(line)
		legend.Add(r.Strategy, line)
	}
	const width, height, legendWidth = 10 * vg.Inch, 5 * vg.Inch, 1.6 * vg.Inch
	img := vgimg.New(width, height)
	dc := draw.New(img)
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	legend.Draw(draw.Crop(dc, width-legendWidth+vg.Points(8), 0, 0, -vg.Points(24)))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// callsChart draws origin calls per expiry per strategy (ideal: 1) as bars
// on a log10 axis.
func callsChart(path, title string, results []Result) error {
	p := plot.New()
	p.Title.Text = "origin calls per key expiry (ideal 1.00) — " + title
	p.Y.Label.Text = "origin calls per expiry (log scale)"
	vals := make(plotter.Values, len(results))
	names := make([]string, len(results))
	top := 1.0
	for i, r := range results {
		vals[i] = math.Log10(math.Max(r.CallsPerExp, 1))
		top = math.Max(top, vals[i])
		names[i] = fmt.Sprintf("%s\n%.2f", r.Strategy, r.CallsPerExp)
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(28))
	if err != nil {
		return err
	}
	bars.Color = plotutil.Color(0)
	p.Add(bars)
	p.NominalX(names...)
	var ticks []plot.Tick
	for e := 0; float64(e) <= math.Ceil(top); e++ {
		ticks = append(ticks, plot.Tick{Value: float64(e), Label: strconv.FormatFloat(math.Pow(10, float64(e)), 'f', 0, 64)})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min, p.Y.Max = 0, math.Ceil(top)
	return p.Save(11*vg.Inch, 5*vg.Inch, path)
}
