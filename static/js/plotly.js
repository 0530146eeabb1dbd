// plotly.min.js (4.8 MB; 60-190 ms of the main thread to compile and run) is run once the page's first run is
// answered and its views in sight are drawn as far as they can be without it (main.js askPlotly), so that it runs
// neither before the page can ask nor beside the server's forward and the first layer's download. index.html only
// preloads it (the bytes, not the run). The views that plot with it export `needsPlotly`: main.js holds their
// draw, and the "attnlab:drawn" mark, until it is here.

const SRC = "/vendor/plotly.min.js";

// Every plot's config: no mode bar. Its buttons were 18 tab stops on the page (lasso and box select on a heatmap,
// pan, autoscale, a PNG export the page's own buttons already give); zoom is a drag on the plot, and a double click
// (or the large head's "Reset zoom") goes back.
export const PLOT_CONFIG = { displaylogo: false, responsive: true, displayModeBar: false };
let loading = null;

export function loadPlotly() {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  loading ??= new Promise((resolve, reject) => {
    const script = Object.assign(document.createElement("script"), { src: SRC, async: true });
    script.addEventListener("load", () => resolve(window.Plotly));
    script.addEventListener("error", () => reject(new Error(`could not load ${SRC}`)));
    document.head.append(script);
  });
  return loading;
}
