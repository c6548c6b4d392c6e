#include "bench/child_process.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <stdexcept>

namespace tessera::bench {

ChildProcess::ChildProcess(const std::string& command) {
  int in[2], out[2];  // in: we write, the child reads; out: the reverse
  if (pipe(in) != 0) throw std::runtime_error("pipe failed");
  if (pipe(out) != 0) {
    close(in[0]);
    close(in[1]);
    throw std::runtime_error("pipe failed");
  }
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  to_child_ = fdopen(in[1], "w");
  from_child_ = fdopen(out[0], "r");
  // A child that ends early must not kill us with SIGPIPE on the next write.
  std::signal(SIGPIPE, SIG_IGN);
}

ChildProcess::~ChildProcess() { wait(); }

void ChildProcess::write_line(const std::string& line) {
  if (to_child_ == nullptr) return;
  std::fputs((line + "\n").c_str(), to_child_);
  std::fflush(to_child_);
}

std::string ChildProcess::read_line(bool* ended) {
  *ended = from_child_ == nullptr;
  std::string line;
  if (*ended) return line;
  int ch;
  while ((ch = std::fgetc(from_child_)) != EOF && ch != '\n') line += static_cast<char>(ch);
  *ended = ch == EOF && line.empty();
  return line;
}

int ChildProcess::wait() {
  if (to_child_ != nullptr) std::fclose(to_child_);
  to_child_ = nullptr;
  if (from_child_ != nullptr) std::fclose(from_child_);
  from_child_ = nullptr;
  if (pid_ <= 0) return -1;
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace tessera::bench
