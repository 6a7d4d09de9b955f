# plot.awk: a bar chart as one SVG, with no dependencies; the scaling plot
# of `make bench` (e2e/demo/bench.sh) and of the GPU suite's checkpoint
# benchmark (e2e/gpu/ckpt-bench.sh).
#
#   awk -F'|' -v out=FILE.svg -v title=TITLE -v names='a|b|c' -f plot.awk
#
# Each input line is one group of bars: LABEL|V1|V2|..., one value per
# name (empty: no bar). Bars share one linear scale, up to the largest.
BEGIN {
	k = split(names, name, "|")
	split("#4c72b0 #dd8452 #999999 #55a868", col, " ")
}
{
	n++
	label[n] = $1
	for (j = 1; j <= k; j++) {
		v[n, j] = $(j + 1)
		if ($(j + 1) + 0 > top)
			top = $(j + 1) + 0
	}
}
END {
	if (top <= 0)
		top = 1
	gw = k * 40 + 30
	W = 120 + n * gw; H = 320
	if (W < 120 + k * 90)
		W = 120 + k * 90
	printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H > out
	printf "<text x=\"10\" y=\"20\">%s</text>\n", title > out
	for (i = 1; i <= n; i++) {
		x = 60 + (i - 1) * gw
		for (j = 1; j <= k; j++) {
			if (v[i, j] == "")
				continue
			h = 240 * v[i, j] / top
			printf "<rect x=\"%d\" y=\"%.1f\" width=\"36\" height=\"%.1f\" fill=\"%s\"/>\n", x + (j - 1) * 40, 280 - h, h, col[j] > out
			printf "<text x=\"%d\" y=\"%.1f\">%d</text>\n", x + (j - 1) * 40, 276 - h, v[i, j] > out
		}
		printf "<text x=\"%d\" y=\"298\">%s</text>\n", x + 30, label[i] > out
	}
	for (j = 1; j <= k; j++)
		printf "<text x=\"%d\" y=\"315\" fill=\"%s\">%s</text>\n", 60 + (j - 1) * 90, col[j], name[j] > out
	print "</svg>" > out
}
