from rpbcast.experiments.convergence.cli import main

main()
