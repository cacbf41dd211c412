// The dashboard's files (src/server/dashboard/: HTML, CSS, JavaScript), embedded in the binary at
// build time by cmake/kvserve_embed_assets.cmake, so `kvserve serve` needs no file, CDN or network
// to serve GET /dashboard. The definition is generated (build/generated/dashboard_assets.cpp).
#pragma once

#include <span>
#include <string_view>

namespace kvs {

struct DashboardAsset {
  std::string_view name;          // file name, e.g. "index.html", "block_map.js"
  std::string_view content_type;  // "text/html; charset=utf-8", "text/javascript; ..."
  std::string_view body;
};

[[nodiscard]] std::span<const DashboardAsset> dashboard_assets();

}  // namespace kvs
