// KvStreamHub (kv_stream.h) with a fake view source. Most tests drive the hub's ticks themselves
// (own_clock = false), so they check structure, not timing: one view taken per tick and none
// while nobody watches (frame number == views taken); every subscriber gets the very same bytes
// of each frame (one encoding per tick); a new subscriber starts with a key frame that equals
// what the others rebuilt from deltas; a subscriber that stops reading is bounded and
// resynchronised with a key frame; the subscriber cap holds; stop() ends every stream. One test
// runs the real publisher thread.
#include "server/kv_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>

#include "server/kv_delta.h"

namespace kvs {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr uint32_t kBlocks = 8;

// View k (k = 0, 1, ...) has block k % kBlocks in use with fill k % 16 + 1: every view differs
// from the previous one, and the expected cells of any view are known.
std::vector<uint32_t> expected_cells(int views) {
  std::vector<uint32_t> cells(kBlocks, 0);
  if (views > 0) {
    const int k = views - 1;
    cells[k % kBlocks] = pack_cell(BlockState::kInUse, 1, k % 16 + 1, 0);
  }
  return cells;
}

struct FakeSource {
  std::atomic<int> views{0};
  KvStreamSource source() {
    return {.take_view = [this]() -> std::shared_ptr<const KvView> {
              auto v = std::make_shared<KvView>();
              v->blocks.resize(kBlocks);
              const int k = views++;
              v->blocks[k % kBlocks] = {
                  .state = BlockState::kInUse, .refcount = 1, .filled = uint32_t(k % 16 + 1)};
              return v;
            },
            .metrics_fields = [](const KvView&) { return std::string("\"metrics\":{}"); },
            .config_fields = "\"config\":{\"num_blocks\":8}"};
  }
};

using Frames = std::vector<std::shared_ptr<const std::string>>;

// Whatever is queued now (no waiting: with own_clock = false nothing arrives on its own).
Frames take(KvSubscription& sub) {
  Frames out;
  EXPECT_TRUE(sub.wait(&out, 0ms));
  return out;
}

json parse(const std::shared_ptr<const std::string>& f) {
  EXPECT_EQ(f->rfind("data: ", 0), 0u);
  EXPECT_EQ(f->substr(f->size() - 2), "\n\n");
  return json::parse(f->substr(6));
}

// The page's cells after applying a frame.
void apply_frame(const json& f, std::vector<uint32_t>* cells) {
  if (f["key"].get<bool>()) cells->assign(kBlocks, 0);
  ASSERT_TRUE(apply_cell_runs(f["cells"].get<std::vector<uint32_t>>(), *cells).is_ok());
}

TEST(DashboardStream, OneViewPerTickAndTheSameBytesForEverySubscriber) {
  const TenantLabeler labeler;
  FakeSource fake;
  KvStreamHub hub(labeler, fake.source(), {.max_subscribers = 2, .own_clock = false});
  hub.tick();
  EXPECT_EQ(fake.views.load(), 0) << "no view is taken while nobody watches";

  auto a = hub.subscribe();
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(take(*a).empty()) << "frames come with ticks, not with subscribing";
  hub.tick();
  Frames fa = take(*a);
  ASSERT_EQ(fa.size(), 1u);
  json f = parse(fa[0]);
  EXPECT_TRUE(f["key"].get<bool>());
  EXPECT_EQ(f["frame"].get<int>(), 1);
  EXPECT_TRUE(f.contains("config"));
  EXPECT_TRUE(f.contains("metrics"));
  std::vector<uint32_t> cells_a;
  apply_frame(f, &cells_a);
  EXPECT_EQ(cells_a, expected_cells(1));

  for (int t = 2; t <= 4; ++t) {
    hub.tick();
    fa = take(*a);
    ASSERT_EQ(fa.size(), 1u) << "one frame per tick";
    f = parse(fa[0]);
    EXPECT_FALSE(f["key"].get<bool>());
    EXPECT_FALSE(f.contains("config")) << "config rides on key frames only";
    EXPECT_EQ(f["frame"].get<int>(), t);
    EXPECT_EQ(fake.views.load(), t) << "frame number == views taken";
    apply_frame(f, &cells_a);
    EXPECT_EQ(cells_a, expected_cells(t));
  }

  auto b = hub.subscribe();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(hub.subscribe(), nullptr) << "at most max_subscribers";
  hub.tick();
  EXPECT_EQ(fake.views.load(), 5) << "one view for both subscribers";
  fa = take(*a);
  Frames fb = take(*b);
  ASSERT_EQ(fa.size(), 1u);
  ASSERT_EQ(fb.size(), 1u);
  const json da = parse(fa[0]), kb = parse(fb[0]);
  EXPECT_FALSE(da["key"].get<bool>());
  EXPECT_TRUE(kb["key"].get<bool>()) << "a new subscriber starts with a key frame";
  EXPECT_EQ(da["frame"], kb["frame"]);
  EXPECT_EQ(kb["frame"].get<int>(), 5);
  apply_frame(da, &cells_a);
  std::vector<uint32_t> cells_b;
  apply_frame(kb, &cells_b);
  EXPECT_EQ(cells_a, cells_b) << "deltas since frame 1 == the key frame of frame 5";
  EXPECT_EQ(cells_b, expected_cells(5));

  // From then on both get the very same frame object of each tick: one encoding per tick.
  for (int t = 6; t <= 20; ++t) {
    hub.tick();
    fa = take(*a);
    fb = take(*b);
    ASSERT_EQ(fa.size(), 1u);
    ASSERT_EQ(fb.size(), 1u);
    EXPECT_EQ(fa[0], fb[0]) << "frame " << t << " was encoded more than once";
    f = parse(fa[0]);
    EXPECT_EQ(f["frame"].get<int>(), t);
    EXPECT_EQ(fake.views.load(), t);
    apply_frame(f, &cells_a);
    apply_frame(f, &cells_b);
  }
  EXPECT_EQ(cells_a, expected_cells(20));
  EXPECT_EQ(cells_b, expected_cells(20));

  hub.unsubscribe(b);
  hub.tick();
  EXPECT_EQ(take(*a).size(), 1u);
  EXPECT_TRUE(take(*b).empty()) << "nothing is queued for a subscriber that left";
  EXPECT_NE(hub.subscribe(), nullptr) << "a freed place can be taken again";
}

TEST(DashboardStream, MetricsEveryNthFrameAndOnKeyFrames) {
  const TenantLabeler labeler;
  FakeSource fake;
  KvStreamHub hub(labeler, fake.source(), {.metrics_every = 3, .own_clock = false});
  auto sub = hub.subscribe();
  ASSERT_NE(sub, nullptr);
  std::vector<bool> with_metrics;
  for (int t = 1; t <= 9; ++t) {
    hub.tick();
    const Frames fs = take(*sub);
    ASSERT_EQ(fs.size(), 1u);
    with_metrics.push_back(parse(fs[0]).contains("metrics"));
  }
  // Frame 1 is the key frame; then the ticks whose count of frames before them is a multiple of
  // metrics_every (3 and 6 frames before: frames 4 and 7).
  EXPECT_EQ(with_metrics,
            (std::vector<bool>{true, false, false, true, false, false, true, false, false}));
}

TEST(DashboardStream, ASubscriberThatStopsReadingIsBoundedAndResynchronised) {
  const TenantLabeler labeler;
  FakeSource fake;
  KvStreamHub hub(labeler, fake.source(), {.max_queued_frames = 4, .own_clock = false});
  auto sub = hub.subscribe();
  ASSERT_NE(sub, nullptr);
  hub.tick();
  ASSERT_EQ(take(*sub).size(), 1u);  // the key frame

  // Up to max_queued_frames unread frames are kept, in order.
  for (int t = 0; t < 4; ++t) hub.tick();
  Frames fs = take(*sub);
  ASSERT_EQ(fs.size(), 4u);
  for (size_t i = 0; i < fs.size(); ++i) EXPECT_EQ(parse(fs[i])["frame"].get<size_t>(), 2 + i);

  // One more than that: the queue is dropped (never more than 4 held), and the next tick
  // brings a key frame from which the page converges.
  for (int t = 0; t < 5; ++t) hub.tick();
  EXPECT_TRUE(take(*sub).empty());
  hub.tick();
  fs = take(*sub);
  ASSERT_EQ(fs.size(), 1u);
  const json key = parse(fs[0]);
  EXPECT_TRUE(key["key"].get<bool>());
  EXPECT_EQ(key["frame"].get<int>(), fake.views.load());
  std::vector<uint32_t> cells;
  apply_frame(key, &cells);
  EXPECT_EQ(cells, expected_cells(fake.views.load()));
}

TEST(DashboardStream, StopEndsEveryStream) {
  const TenantLabeler labeler;
  FakeSource fake;
  KvStreamHub hub(labeler, fake.source(), {.own_clock = false});
  auto sub = hub.subscribe();
  ASSERT_NE(sub, nullptr);
  hub.tick();
  hub.stop();
  Frames frames;
  EXPECT_FALSE(sub->wait(&frames, 1s)) << "closed";
  EXPECT_EQ(frames.size(), 1u) << "what was queued before stop() is still delivered";
  EXPECT_EQ(hub.subscribe(), nullptr);
  hub.tick();
  EXPECT_EQ(fake.views.load(), 1) << "no view after stop()";
  hub.stop();  // idempotent
}

// Waits (deadline 30 s) until `sub` has received `n` frames; returns them parsed.
std::vector<json> wait_frames(KvSubscription& sub, size_t n) {
  std::vector<json> frames;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (frames.size() < n && std::chrono::steady_clock::now() < deadline) {
    Frames fs;
    EXPECT_TRUE(sub.wait(&fs, 50ms));
    for (const auto& f : fs) frames.push_back(parse(f));
  }
  EXPECT_GE(frames.size(), n);
  return frames;
}

// The real clock: the publisher thread sleeps while nobody watches and then ticks on its own.
// Only order is checked (a key frame, then consecutive deltas; never more frames than views),
// with a generous deadline, not a rate.
TEST(DashboardStream, ThePublisherThreadTicksWhileSomeoneWatches) {
  const TenantLabeler labeler;
  FakeSource fake;
  KvStreamHub hub(labeler, fake.source(), {.interval = 5ms});
  // Nobody watches `hub` while a watched witness hub of the same interval ticks 6 times: had
  // `hub`'s thread ticked without a watcher, it would have taken views by then (no fixed sleep).
  {
    FakeSource witness_source;
    KvStreamHub witness(labeler, witness_source.source(), {.interval = 5ms});
    auto w = witness.subscribe();
    ASSERT_NE(w, nullptr);
    (void)wait_frames(*w, 6);
  }
  EXPECT_EQ(fake.views.load(), 0) << "no view is taken while nobody watches";
  auto sub = hub.subscribe();
  ASSERT_NE(sub, nullptr);
  const std::vector<json> frames = wait_frames(*sub, 5);
  ASSERT_GE(frames.size(), 5u);
  EXPECT_TRUE(frames[0]["key"].get<bool>());
  EXPECT_EQ(frames[0]["frame"].get<int>(), 1) << "the first view is the subscriber's first tick";
  for (size_t i = 1; i < frames.size(); ++i) {
    EXPECT_FALSE(frames[i]["key"].get<bool>());
    EXPECT_EQ(frames[i]["frame"].get<int>(), frames[i - 1]["frame"].get<int>() + 1);
  }
  EXPECT_LE(frames.back()["frame"].get<int>(), fake.views.load());
  hub.stop();
  Frames rest;
  EXPECT_FALSE(sub->wait(&rest, 1s));
}

}  // namespace
}  // namespace kvs
