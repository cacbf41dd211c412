// Shared fixtures of the engine tests: the default model loaded once per test binary, and an
// engine built for it.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "engine/engine.h"
#include "model/loaded_model.h"
#include "model/model_paths.h"

namespace kvs::test {

// The default model, loaded on first use; nullptr when it has not been fetched.
inline LoadedModel* shared_model() {
  static std::unique_ptr<LoadedModel> model = [] {
    auto m = load_model(default_model_path());
    return m.is_ok() ? std::make_unique<LoadedModel>(std::move(m).value()) : nullptr;
  }();
  return model.get();
}

// An engine for `m` with the model's fingerprint and end-of-generation tokens filled in
// (2 threads unless the config says otherwise).
inline std::unique_ptr<Engine> make_engine(LoadedModel& m, EngineConfig c) {
  c.model_fingerprint = m.fingerprint;
  c.eog_ids = m.eog_ids;
  if (c.threads == 0) c.threads = 2;
  auto e = Engine::create(*m.model, c);
  EXPECT_TRUE(e.is_ok()) << e.status().to_string();
  return std::move(e).value();
}

}  // namespace kvs::test

// Declares `model` (the shared default model) or skips the test when it is missing.
#define REQUIRE_MODEL()                             \
  LoadedModel* model = ::kvs::test::shared_model(); \
  if (model == nullptr) GTEST_SKIP() << "default model not found at " << default_model_path()
