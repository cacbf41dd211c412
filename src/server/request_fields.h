// Which fields of an OpenAI-style request body kvserve reads, and what it does with the others.
//
//   supported     read and honoured (RequestParser);
//   unsupported   a feature kvserve does not have (tools, response_format, prompt_logprobs, guided
//                 decoding, beam search, ...): a 400 naming the field, unless the value asks for
//                 nothing (null, false, an empty list, or the field's default), so that clients
//                 which always send the defaults keep working;
//   ignored       metadata that changes no output (user, metadata, store): accepted silently;
//   unknown       anything else: accepted (as vLLM does) and reported, so that the server can log
//                 each unknown name once.
// Never silently ignoring a feature is the point: a client that asks for JSON output or
// a grammar and gets free text with a 200 is worse off than one told "not supported".
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kvs {

struct FieldProblem {
  std::string field;
  std::string message;
};

// Checks the top-level fields of `body` (an object) for one route. Returns the first unsupported
// field that asks for something; appends the unknown field names to *unknown.
[[nodiscard]] std::optional<FieldProblem> check_request_fields(const nlohmann::json& body,
                                                               bool chat,
                                                               std::vector<std::string>* unknown);

// Logs each unknown field name once ("request field 'x' is not known to kvserve; ignored"). Names
// are clients' bytes: they are shown escaped and cut to 64 bytes, and at most kMaxNames distinct
// names are remembered (then one line says later ones are not logged), so no client can flood
// the log or grow the server's memory. Thread-safe.
class UnknownFieldLog {
 public:
  static constexpr size_t kMaxNames = 64;
  // `sink` writes one line (the server's log, at warning level).
  explicit UnknownFieldLog(std::function<void(const std::string&)> sink) : sink_(std::move(sink)) {}
  void note(const std::vector<std::string>& names);
  // The line logged for a name (escaped, cut), for tests.
  [[nodiscard]] static std::string printable(const std::string& name);

 private:
  std::function<void(const std::string&)> sink_;
  std::mutex mu_;
  std::set<std::string> seen_;
  bool full_ = false;
};

}  // namespace kvs
