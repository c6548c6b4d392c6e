#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"

using namespace tessera;

namespace {

// The message of the ConfigError that `f` throws; a failed check when none.
template <typename F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL_CHECK("expected a ConfigError");
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Line numbers matter below: "units: abc" is line 9, its value at column 14.
const char* const kRun = R"(name: mnist_mlp
seed: 42
model:
  layers:
    - type: dense
      units: 128
      activation: relu
    - type: dense
      units: abc
      use_bias: false
data:
  path: data/mnist
  big: 9000000000
lr: 1.0e-3
scale: 0.5
shape: [28, 28]
ratios: [0.25, 1]
tags: [a, b]
quoted: "64"
empty:
)";

// A temporary file removed when the test ends.
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& name, const std::string& text)
      : path(std::filesystem::temp_directory_path() /
             ("tessera_config_test_" + std::to_string(::getpid()) + "_" + name)) {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

}  // namespace

TEST_CASE("config: parse a string and walk maps and sequences") {
  ConfigNode root = ConfigNode::parse(kRun, "run.yaml");
  CHECK(root.is_map());
  CHECK(root.path() == "");
  CHECK(root.keys() == std::vector<std::string>{"name", "seed", "model", "data", "lr", "scale",
                                                "shape", "ratios", "tags", "quoted", "empty"});
  CHECK(root.has("seed"));
  CHECK_FALSE(root.has("epochs"));
  CHECK_FALSE(root.find("epochs").has_value());
  CHECK(root["empty"].is_null());
  CHECK(root["name"].is_scalar());

  ConfigNode layers = root["model"]["layers"];
  CHECK(layers.is_sequence());
  CHECK(layers.size() == 2);
  CHECK(layers.path() == "model.layers");
  ConfigNode units = layers.at(1)["units"];
  CHECK(units.path() == "model.layers[1].units");
  CHECK(units.location() == "run.yaml:9:14");
  CHECK(layers.at(0).location() == "run.yaml:5:7");
  CHECK(layers.at(0).keys() == std::vector<std::string>{"type", "units", "activation"});

  CHECK(contains(config_error([&] { layers.at(2); }),
                 "model.layers: index 2 is out of range (the sequence has 2 items)"));
  CHECK(contains(config_error([&] { root["name"].at(0); }), "expected a sequence, got 'mnist_mlp'"));
  CHECK(contains(config_error([&] { root["name"]["x"]; }),
                 "run.yaml:1:7: name: expected a map, got 'mnist_mlp'"));
  CHECK(contains(config_error([&] { layers.keys(); }), "expected a map, got a sequence"));
  // A null value reads as an empty map, so a section left empty takes defaults.
  CHECK(root["empty"].keys().empty());
  CHECK_FALSE(root["empty"].has("x"));
}

TEST_CASE("config: every value type, and what a wrong type says") {
  ConfigNode root = ConfigNode::parse(kRun, "run.yaml");
  CHECK(root["name"].as<std::string>() == "mnist_mlp");
  CHECK(root["seed"].as<int>() == 42);
  CHECK(root["seed"].as<std::int64_t>() == 42);
  CHECK(root["data"]["big"].as<std::int64_t>() == 9000000000);
  CHECK(root["lr"].as<double>() == 1.0e-3);
  CHECK(root["lr"].as<float>() == 1.0e-3f);
  CHECK(root["seed"].as<double>() == 42.0);  // an integer is a number too
  CHECK(root["model"]["layers"].at(1)["use_bias"].as<bool>() == false);
  CHECK(root["shape"].as<std::vector<std::int64_t>>() == std::vector<std::int64_t>{28, 28});
  CHECK(root["shape"].as<std::vector<int>>() == std::vector<int>{28, 28});
  CHECK(root["ratios"].as<std::vector<double>>() == std::vector<double>{0.25, 1.0});
  CHECK(root["tags"].as<std::vector<std::string>>() == std::vector<std::string>{"a", "b"});
  CHECK(root["seed"].as<std::string>() == "42");  // a plain scalar reads as its text
  CHECK(root["quoted"].as<std::string>() == "64");

  CHECK(config_error([&] { root["model"]["layers"].at(1)["units"].as<int>(); }) ==
        "run.yaml:9:14: model.layers[1].units: expected an integer, got 'abc'");
  CHECK(config_error([&] { root["data"]["big"].as<int>(); }) ==
        "run.yaml:13:8: data.big: expected an integer in [-2147483648, 2147483647], got "
        "'9000000000'");
  CHECK(contains(config_error([&] { root["scale"].as<int>(); }),
                 "run.yaml:15:8: scale: expected an integer, got '0.5'"));
  CHECK(contains(config_error([&] { root["name"].as<double>(); }),
                 "run.yaml:1:7: name: expected a number, got 'mnist_mlp'"));
  CHECK(contains(config_error([&] { root["name"].as<bool>(); }),
                 "run.yaml:1:7: name: expected a boolean (true or false), got 'mnist_mlp'"));
  CHECK(contains(config_error([&] { root["name"].as<std::int64_t>(); }),
                 "run.yaml:1:7: name: expected an integer, got 'mnist_mlp'"));
  CHECK(contains(config_error([&] { root["shape"].as<float>(); }),
                 "run.yaml:16:8: shape: expected a number, got a sequence"));
  CHECK(contains(config_error([&] { root["model"].as<std::vector<std::string>>(); }),
                 "run.yaml:4:3: model: expected a sequence of strings, got a map"));
  CHECK(contains(config_error([&] { root["ratios"].as<std::vector<std::int64_t>>(); }),
                 "run.yaml:17:10: ratios[0]: expected an integer, got '0.25'"));
  CHECK(contains(config_error([&] { root["model"].as<std::string>(); }),
                 "run.yaml:4:3: model: expected a string, got a map"));
  CHECK(contains(config_error([&] { root["seed"].as<std::vector<int>>(); }),
                 "seed: expected a sequence of integers, got '42'"));
  CHECK(contains(config_error([&] { root["tags"].as<std::vector<double>>(); }),
                 "run.yaml:18:8: tags[0]: expected a number, got 'a'"));
  CHECK(contains(config_error([&] { root["empty"].as<int>(); }),
                 "run.yaml:20:1: empty: expected an integer, got null"));
  // Quotes make a string, and the message says so.
  CHECK(contains(config_error([&] { root["quoted"].as<int>(); }),
                 "quoted: expected an integer, got the quoted string '64'"));

  ConfigNode more = ConfigNode::parse(
      "a: +7\nb: -.inf\nc: .nan\nd: yes\ne: 1e400\nf: 1e39\ng: -12\nh: 0x10\n");
  CHECK(more["a"].as<int>() == 7);
  CHECK(std::isinf(more["b"].as<double>()));
  CHECK(std::isnan(more["c"].as<float>()));
  CHECK(more["d"].as<bool>());
  CHECK(more["g"].as<std::int64_t>() == -12);
  CHECK(contains(config_error([&] { more["e"].as<double>(); }), "out of range"));
  CHECK(contains(config_error([&] { more["f"].as<float>(); }), "expected a number in float range"));
  CHECK(contains(config_error([&] { more["h"].as<int>(); }), "expected an integer, got '0x10'"));
  CHECK(more["f"].as<double>() == 1e39);
}

TEST_CASE("config: a missing required key names the map, its location and a near miss") {
  ConfigNode root = ConfigNode::parse(kRun, "run.yaml");
  CHECK(config_error([&] { root["model"]["layers"].at(1)["activation"]; }) ==
        "run.yaml:8:7: model.layers[1]: missing required key 'activation'");
  CHECK(config_error([&] { root["model"]["layers"].at(0)["unit"]; }) ==
        "run.yaml:5:7: model.layers[0]: missing required key 'unit' (is 'units' a misspelling of "
        "it?)");
  CHECK(config_error([&] { root["epochs"]; }) == "run.yaml:1:1: missing required key 'epochs'");
}

TEST_CASE("config: unknown keys are errors with a did-you-mean") {
  ConfigNode root = ConfigNode::parse("model:\n  layers:\n    - type: dense\n      unit: 3\n", "m.yaml");
  ConfigNode layer = root["model"]["layers"].at(0);
  std::vector<std::string> known = {"type", "units", "activation", "use_bias"};
  CHECK(config_error([&] { layer.expect_keys(known); }) ==
        "m.yaml:4:7: model.layers[0]: unknown key 'unit' (did you mean 'units'?); known keys: "
        "type, units, activation, use_bias");
  CHECK(config_error([&] { root.expect_keys({"data"}); }) ==
        "m.yaml:1:1: unknown key 'model'; known keys: data");
  root.expect_keys({"model", "train"});  // every key known: no error
  ConfigNode optimizer = ConfigNode::parse("optimizer:\n")["optimizer"];
  optimizer.expect_keys({"lr"});  // null: no keys to check

  // yaml-cpp keeps both copies of a repeated key; the loader refuses them.
  ConfigNode twice = ConfigNode::parse("a: 1\nb: 2\na: 3\n", "t.yaml");
  CHECK(config_error([&] { twice.expect_keys({"a", "b"}); }) ==
        "t.yaml:3:1: key 'a' appears twice (first at t.yaml:1:1)");
}

TEST_CASE("config: defaults are written back, so the dump is the resolved config") {
  ConfigNode root = ConfigNode::parse("train:\n  epochs: 3\nmodel:\n  layers:\n    - units: 4\n");
  ConfigNode train = root["train"];
  CHECK(train.get("epochs", 10) == 3);  // present: the file's value
  CHECK(train.get("batch_size", 32) == 32);
  CHECK(train.get("learning_rate", 0.1) == 0.1);
  CHECK(train.get("momentum", 0.9f) == 0.9f);
  CHECK(train.get("shuffle", true));
  CHECK(train.get("optimizer", "adam") == "adam");
  CHECK(train.get<std::int64_t>("steps", 1000) == 1000);
  CHECK(train.get("milestones", std::vector<int>{10, 20}) == std::vector<int>{10, 20});
  CHECK(train.get("betas", std::vector<double>{0.9, 0.999}) == std::vector<double>{0.9, 0.999});
  CHECK(train.get("metrics", std::vector<std::string>{"accuracy"}) ==
        std::vector<std::string>{"accuracy"});
  CHECK(root["model"]["layers"].at(0).get("activation", std::string("relu")) == "relu");
  CHECK(root.get("seed", std::int64_t{7}) == 7);

  // Every handle shares the document: the root sees what was written through train.
  CHECK(root["train"]["batch_size"].as<int>() == 32);
  CHECK(root["train"]["batch_size"].path() == "train.batch_size");
  std::string dumped = root.dump();
  CHECK(dumped ==
        "train:\n"
        "  epochs: 3\n"
        "  batch_size: 32\n"
        "  learning_rate: 0.1\n"
        "  momentum: 0.9\n"
        "  shuffle: true\n"
        "  optimizer: adam\n"
        "  steps: 1000\n"
        "  milestones: [10, 20]\n"
        "  betas: [0.9, 0.999]\n"
        "  metrics: [accuracy]\n"
        "model:\n"
        "  layers:\n"
        "    - units: 4\n"
        "      activation: relu\n"
        "seed: 7\n");
  // The dump reads back to the same values.
  ConfigNode again = ConfigNode::parse(dumped);
  CHECK(again["train"]["momentum"].as<float>() == 0.9f);
  CHECK(again["train"]["betas"].as<std::vector<double>>() == std::vector<double>{0.9, 0.999});
  CHECK(again["model"]["layers"].at(0)["activation"].as<std::string>() == "relu");

  // A default under an empty section turns it into a map.
  ConfigNode empty = ConfigNode::parse("optimizer:\n");
  CHECK(empty["optimizer"].get("lr", 1.0) == 1.0);
  CHECK(empty.dump() == "optimizer:\n  lr: 1.0\n");
  CHECK(contains(config_error([&] { empty["optimizer"]["lr"].get("x", 1); }),
                 "optimizer.lr: expected a map, got '1.0'"));
}

TEST_CASE("config: set and dump") {
  ConfigNode root = ConfigNode::parse("a: 1\nb: {c: 2}\n");
  root.set("a", 5);
  root.set("name", "x");
  root.set("b2", root["b"]);  // a copy, not an alias
  ConfigNode b2 = root["b2"];
  b2.set("c", 3);
  CHECK(root["a"].as<int>() == 5);
  CHECK(root["b"]["c"].as<int>() == 2);
  CHECK(root["b2"]["c"].as<int>() == 3);
  CHECK(root["b"].dump() == "{c: 2}\n");
  // The copy has no positions of its own: its errors point at the original.
  CHECK(contains(config_error([&] { root["b2"]["c"].get("d", 1); }), "<string>:2:4: b2.c:"));
  CHECK(root["a"].dump() == "5\n");
}

TEST_CASE("config: a section taken from another file still points into it") {
  ConfigNode run = ConfigNode::parse("model: mlp.yaml\n", "run.yaml");
  ConfigNode zoo = ConfigNode::parse("layers:\n  - units: x\n", "mlp.yaml");
  run.set("model", zoo);
  CHECK(config_error([&] { run["model"]["layers"].at(0)["units"].as<int>(); }) ==
        "mlp.yaml:2:12: model.layers[0].units: expected an integer, got 'x'");
  CHECK(config_error([&] { run["model"].expect_keys({"inputs"}); }) ==
        "mlp.yaml:1:1: model: unknown key 'layers'; known keys: inputs");
  CHECK(config_error([&] { run["model"]["layers"].fail("needs two layers"); }) ==
        "mlp.yaml:2:3: model.layers: needs two layers");
  CHECK(run.dump() == "model:\n  layers:\n    - units: x\n");
  CHECK(config_error([&] { run.fail("bad"); }) == "run.yaml:1:1: bad");
}

TEST_CASE("config: command-line overrides") {
  const char* text = R"(model:
  layers:
    - units: 128
    - units: 10
train:
  lr: 0.1
  epochs: 3
)";
  ConfigNode root = ConfigNode::parse(text, "run.yaml");
  apply_override(root, "train.lr=1.0e-3");
  apply_override(root, "model.layers.1.units=64");
  apply_override(root, "model.layers[0].units=256");
  apply_override(root, "train.optimizer.name=adam");  // creates two levels
  apply_override(root, "train.betas=[0.9, 0.95]");
  apply_override(root, "train.schedule={kind: cosine, warmup: 100}");
  apply_override(root, "train.shuffle=true");
  CHECK(root["train"]["lr"].as<double>() == 1.0e-3);
  CHECK(root["model"]["layers"].at(1)["units"].as<int>() == 64);
  CHECK(root["model"]["layers"].at(0)["units"].as<int>() == 256);
  CHECK(root["train"]["optimizer"]["name"].as<std::string>() == "adam");
  CHECK(root["train"]["betas"].as<std::vector<double>>() == std::vector<double>{0.9, 0.95});
  CHECK(root["train"]["schedule"]["warmup"].as<int>() == 100);
  CHECK(root["train"]["shuffle"].as<bool>());
  CHECK(contains(root.dump(), "lr: 1.0e-3"));
  CHECK(contains(root.dump(), "units: 64"));
  CHECK(root["train"]["epochs"].location() == "run.yaml:7:11");  // untouched values keep theirs

  // A value set by an override reports the override, not a line of the file.
  apply_override(root, "train.epochs=many");
  CHECK(config_error([&] { root["train"]["epochs"].as<int>(); }) ==
        "override 'train.epochs=many': train.epochs: expected an integer, got 'many'");
  CHECK(contains(config_error([&] { root["train"]["schedule"]["kind"].as<int>(); }),
                 "override 'train.schedule={kind: cosine, warmup: 100}': train.schedule.kind:"));
  // ... and so does a misspelt key it added.
  apply_override(root, "train.epoch=5");
  CHECK(contains(config_error([&] { root["train"].expect_keys({"lr", "epochs", "optimizer", "betas",
                                                               "schedule", "shuffle"}); }),
                 "override 'train.epoch=5': train: unknown key 'epoch' (did you mean 'epochs'?)"));

  CHECK(config_error([&] { apply_override(root, "model.layers.2.units=5"); }) ==
        "override 'model.layers.2.units=5': index 2 is out of range for 'model.layers', which has "
        "2 items");
  CHECK(config_error([&] { apply_override(root, "model.layers.first.units=5"); }) ==
        "override 'model.layers.first.units=5': 'model.layers' is a sequence, and 'first' is not "
        "an index");
  CHECK(config_error([&] { apply_override(root, "train.lr.value=5"); }) ==
        "override 'train.lr.value=5': 'train.lr' is a scalar ('1.0e-3'), so it has no 'value'");
  CHECK(contains(config_error([&] { apply_override(root, "train.lr"); }), "expected path=value"));
  CHECK(contains(config_error([&] { apply_override(root, "=3"); }), "the path before '=' is empty"));
  CHECK(contains(config_error([&] { apply_override(root, "train..lr=3"); }), "empty component"));
  CHECK(contains(config_error([&] { apply_override(root, "train.lr=[1, 2"); }),
                 "override 'train.lr=[1, 2': the value is not valid YAML"));
  CHECK(root["train"]["lr"].as<double>() == 1.0e-3);  // failed overrides change nothing

  ConfigNode empty = ConfigNode::parse("");
  apply_override(empty, "a.b=1");
  CHECK(empty.dump() == "a:\n  b: 1\n");
}

TEST_CASE("config: files report their name and 1-based line:column") {
  TempFile file("run.yaml", "model:\n  layers:\n    - unit: 3\n");
  ConfigNode root = ConfigNode::load_file(file.path);
  std::string name = file.path.string();
  CHECK(root.base_dir() == file.path.parent_path());
  // "unit" is on line 3, column 7.
  CHECK(contains(config_error([&] { root["model"]["layers"].at(0).expect_keys({"units"}); }),
                 name + ":3:7: model.layers[0]: unknown key 'unit' (did you mean 'units'?)"));
  CHECK(config_error([&] { root["model"]["layers"].at(0)["units"]; }) ==
        name + ":3:7: model.layers[0]: missing required key 'units' (is 'unit' a misspelling of "
               "it?)");

  TempFile five("five.yaml", "a:\n  b:\n    c: 1\n    d: x\n");
  // "d" is on line 4 column 5, its value at column 8.
  CHECK(contains(config_error([&] { ConfigNode::load_file(five.path)["a"]["b"].expect_keys({"c"}); }),
                 five.path.string() + ":4:5: a.b: unknown key 'd'"));
  CHECK(config_error([&] { ConfigNode::load_file(five.path)["a"]["b"]["d"].as<int>(); }) ==
        five.path.string() + ":4:8: a.b.d: expected an integer, got 'x'");

  TempFile broken("broken.yaml", "model:\n  units: [1, 2\nseed: 3\n");
  std::string syntax = config_error([&] { ConfigNode::load_file(broken.path); });
  CHECK(contains(syntax, broken.path.string() + ":3:"));
  CHECK(contains(syntax, "end of sequence flow not found"));

  TempFile bad_indent("indent.yaml", "a: 1\n  b: 2\n");
  CHECK(config_error([&] { ConfigNode::load_file(bad_indent.path); }) ==
        bad_indent.path.string() + ":2:4: illegal map value");

  std::filesystem::path missing = std::filesystem::temp_directory_path() / "tessera_no_such.yaml";
  CHECK(config_error([&] { ConfigNode::load_file(missing); }) ==
        "config file '" + missing.string() + "' does not exist");
  CHECK(contains(config_error([&] { ConfigNode::load_file(std::filesystem::temp_directory_path()); }),
                 "is a folder, not a file"));

  TempFile empty("empty.yaml", "");
  CHECK(ConfigNode::load_file(empty.path).is_null());
}

TEST_CASE("config: paths in a config are relative to its file") {
  ConfigNode root = ConfigNode::parse("data: x\n", "configs/mnist/run.yaml");
  CHECK(root.base_dir() == std::filesystem::path("configs/mnist"));
  CHECK(root.resolve_path("data/train.csv") == std::filesystem::path("configs/mnist/data/train.csv"));
  CHECK(root.resolve_path("../shared/vocab.txt") == std::filesystem::path("configs/shared/vocab.txt"));
  CHECK(root.resolve_path("/srv/data/a.csv") == std::filesystem::path("/srv/data/a.csv"));
  ConfigNode loose = ConfigNode::parse("a: 1\n");  // no folder: the working directory
  CHECK(loose.base_dir() == std::filesystem::path("."));
  CHECK(loose.resolve_path("data/a.csv") == std::filesystem::path("data/a.csv"));
  CHECK(loose["a"].base_dir() == std::filesystem::path("."));
}

TEST_CASE("config: paths given by an override are relative to the working directory") {
  ConfigNode root = ConfigNode::parse("data: {train: d.csv}\ntraining: {epochs: 1}\n", "configs/mnist/run.yaml");
  apply_override(root, "training.checkpoint=runs/x");
  apply_override(root, "data={train: other.csv, validation: v.csv}");
  CHECK(root["training"]["checkpoint"].resolve_path("runs/x") == std::filesystem::path("runs/x"));
  CHECK(root["data"]["validation"].resolve_path("v.csv") == std::filesystem::path("v.csv"));
  CHECK(root["training"]["epochs"].resolve_path("a") == std::filesystem::path("configs/mnist/a"));  // written in the file
  // A value of another file keeps that file's folder.
  ConfigNode model = ConfigNode::parse("layers: []\n", "models/mlp.yaml");
  root.set("model", model);
  CHECK(root["model"]["layers"].base_dir() == std::filesystem::path("models"));
}

TEST_CASE("config: did_you_mean") {
  std::vector<std::string> keys = {"units", "activation", "use_bias", "kernel_initializer"};
  CHECK(did_you_mean("unit", keys) == "units");
  CHECK(did_you_mean("untis", keys) == "units");  // a swap is one edit
  CHECK(did_you_mean("activaton", keys) == "activation");
  CHECK(did_you_mean("usebias", keys) == "use_bias");
  CHECK(did_you_mean("kernel_initialiser", keys) == "kernel_initializer");
  CHECK(did_you_mean("dropout", keys) == "");
  CHECK(did_you_mean("x", {"lr"}) == "");  // rewriting every letter is no resemblance
  CHECK(did_you_mean("lr", {"lr", "l"}) == "lr");
  CHECK(did_you_mean("ab", {"abc", "abd"}) == "abc");  // ties: the first
  CHECK(did_you_mean("anything", {}) == "");
}
