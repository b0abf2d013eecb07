// `qkv train <task>`: dispatches to the task that was named (train_tasks.h).
#include <iostream>
#include <vector>

#include "command.h"
#include "train_tasks.h"

namespace qkv::cli {

Command add_train_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("train", "Train small models and show what they learned");
  const std::vector<Command> tasks = {
      add_train_recall(*app),
      add_train_lm(*app),
      add_train_fortunes(*app),
  };
  return {app, [app, tasks] {
            for (const Command& task : tasks)
              if (task.app->parsed()) return task.run();
            std::cout << app->help();
            return kExitUsage;  // `qkv train` without a task
          }};
}

}  // namespace qkv::cli
