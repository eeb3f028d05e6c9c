"""What a chart is, for the reports and the dashboard alike: any Altair chart a builder returns."""

from __future__ import annotations

import altair as alt

Figure = alt.Chart | alt.LayerChart | alt.FacetChart | alt.HConcatChart | alt.VConcatChart
