"""The console's curve charts (console/curves_chart.py), pure: a long series is drawn with no
more points than the chart has units of width (issue 25, item 7: 10 curves of 10,000 points in
under 1 s, bench/console_charts.py), its lowest and highest values still drawn."""

from __future__ import annotations

import math

from rlark.console import curves_chart
from rlark.console.curves_chart import LEFT, RIGHT, WIDTH, chart


def _coords(line: dict) -> list[tuple[float, float]]:
    return [tuple(map(float, p.split(","))) for p in line["points"].split()]


def test_a_long_series_is_drawn_with_at_most_two_points_per_unit_of_width_keeping_its_spikes():
    points = [[s, math.sin(s / 300)] for s in range(10_000)]
    points[4321][1] = 50.0  # a spike up and one down, each a single point
    points[8765][1] = -40.0
    c = chart("rollout/rewards", [("job:1", points)])
    [line] = c["lines"]
    drawn = _coords(line)
    width = WIDTH - LEFT - RIGHT
    assert line["count"] == 10_000 and line["drawn"] == len(drawn) <= 2 * width + 2
    ys = [y for _, y in drawn]
    assert min(ys) == c["top"] and max(ys) == c["bottom"]  # the spikes are the chart's ends
    xs = [x for x, _ in drawn]
    assert xs == sorted(xs) and xs[0] == LEFT and xs[-1] == c["right"]


def test_a_short_series_is_drawn_point_for_point():
    points = [[s, float(s % 7)] for s in range(50)]
    [line] = chart("t", [("job:1", points)])["lines"]
    assert line["count"] == line["drawn"] == len(_coords(line)) == 50
    assert [[d["step"], d["value"]] for d in line["dots"]] == points


def test_per_pixel_keeps_each_columns_lowest_and_highest_in_step_order():
    pts = [(0, 1.0), (1, 5.0), (2, -3.0), (3, 2.0), (10, 0.0), (11, 0.0), (12, 0.0), (20, 9.0)]
    assert curves_chart.per_pixel(pts, 0, 20, 2) == [(1, 5.0), (2, -3.0), (10, 0.0), (20, 9.0)]


def test_the_dots_are_written_with_their_step_value_and_an_escaped_title():
    points = [[s, float(s % 7) / 4] for s in range(5)]
    [line] = chart("t", [('job<"&">:1', points)])["lines"]
    svg = str(curves_chart.dots_svg(line, "step"))
    assert svg.count("<circle ") == 5 and "<title>job&lt;&#34;&amp;&#34;&gt;:1 · step 3: 0.75</title>" in svg
    for (step, value), d in zip(points, line["dots"]):
        assert (f'<circle class="cv-dot cv-0" cx="{d["x"]}" cy="{d["y"]}" r="2.5" '
                f'data-step="{step}" data-value="{value}">') in svg
