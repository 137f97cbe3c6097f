from mempalace_logstream.cli import main

main()
