// /docs: Swagger UI (loaded just before, from the fastapi-offline package) draws the API reference from
// /openapi.json. A file rather than an inline script, so that the page's Content-Security-Policy allows scripts
// from this server only. The options are FastAPI's defaults for its own /docs.
"use strict";

window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
