// A command run through /bin/sh with its standard input and output as pipes,
// for a peer that a benchmark paces line by line (bench_fit asks PyTorch for
// one epoch after each of Tessera's). Standard error goes to ours.
//
//   ChildProcess peer("python3 torch_fit.py --paced ...");
//   bool ended = false;
//   std::string ready = peer.read_line(&ended);
//   peer.write_line("epoch");
//   int status = peer.wait();               // closes its input first
#pragma once

#include <cstdio>
#include <string>
#include <sys/types.h>

namespace tessera::bench {

class ChildProcess {
 public:
  explicit ChildProcess(const std::string& command);  // throws std::runtime_error when it cannot start
  ~ChildProcess();                                     // closes the pipes and waits
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  void write_line(const std::string& line);
  // The next line, without its newline; sets *ended when the output ended first.
  std::string read_line(bool* ended);
  // Closes the child's input, waits for it to end; its exit status (-1 if killed).
  int wait();

 private:
  pid_t pid_ = -1;
  std::FILE* to_child_ = nullptr;
  std::FILE* from_child_ = nullptr;
};

}  // namespace tessera::bench
