// The body of GET /v1/kv: every block's state, owners, tenant label, fill, tier key and layer
// group, every live sequence's block tables, the counters and the tiers, built from a KvView
// (kv_view.h) off the engine thread. A scoped view gives the scoped body: another tenant's blocks
// carry the label "other" and no owner count, fill or hash; the tiers' block lists (hashes) only
// for admins.
#pragma once

#include <nlohmann/json.hpp>

#include "kvcache/kv_cache_groups.h"
#include "server/kv_view.h"
#include "server/metrics.h"

namespace kvs {

[[nodiscard]] nlohmann::json kv_view_json(const KvView& view, const KvCacheGroups& groups,
                                          const TenantLabeler& labeler, bool admin);

}  // namespace kvs
